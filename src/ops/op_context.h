#pragma once
// What an op needs besides its tensors: the CPU thread pool now, a CUDA stream and workspace later.
#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"

namespace pagoda {

/// Execution context passed to every op.
struct OpContext {
  ThreadPool* pool = nullptr;
  /// How CPU matmuls run past the decode sizes (LoadOptions::cpu_bf16_round, cpu_onednn).
  cpu::LinearOptions linear{};
};

}  // namespace pagoda
