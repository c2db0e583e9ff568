#pragma once
// Dense projections: the GEMM/GEMV at the heart of every layer.
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagoda::cpu {

/// How linear() multiplies bf16 weights by its fp32 activations once m is large enough for a
/// oneDNN matmul (docs/engine.md, "CPU matmuls").
enum class Bf16Matmul {
  kExact,  // fp32 products of fp32 x and the bf16 weights, accumulated in fp32: the reference
  kRound,  // x rounded to bf16 first, as PyTorch and llama.cpp do: ~2x faster without AMX
};

/// Which kernel linear() runs past the decode sizes (docs/engine.md, "CPU matmuls").
struct LinearOptions {
  /// true: the streaming kernel's arithmetic at every m (blocked for the caches above a few rows),
  /// so a row's result has the same bits whatever the other rows: batch invariance. false: oneDNN
  /// above a few rows (a build with it), faster at prefill sizes, but a row's last bits then depend
  /// on m. Rounded bf16 activations (bf16 = kRound) always take oneDNN.
  bool batch_invariant = true;
  Bf16Matmul bf16 = Bf16Matmul::kExact;
};

/// y[m, n] = sum_k x[m, k] * w[n, k] + bias[n].
/// x: [m, k] fp32 row-major. w: [n, k] row-major in w_dtype (f32, bf16 or f16), the layout of a
/// torch nn.Linear weight, read in place (it may be an mmap of the checkpoint). bias: [n] fp32 or
/// null. y: [m, n] fp32, must not alias x. Accumulates in fp32.
void linear(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
            const float* bias, float* y, ThreadPool& pool, const LinearOptions& options = {});

}  // namespace pagoda::cpu
