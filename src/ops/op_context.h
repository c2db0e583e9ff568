#pragma once
// What an op needs besides its tensors: the CPU thread pool now, a CUDA stream and workspace later.
#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"

namespace pagoda {

/// Execution context passed to every op.
struct OpContext {
  ThreadPool* pool = nullptr;
  /// How CPU matmuls with bf16 weights treat the fp32 activations (LoadOptions::cpu_bf16_round).
  cpu::Bf16Matmul bf16_matmul = cpu::Bf16Matmul::kExact;
};

}  // namespace pagoda
