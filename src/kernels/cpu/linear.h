#pragma once
// Dense projections: the GEMM/GEMV at the heart of every layer.
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagoda::cpu {

/// How linear() multiplies bf16 weights by its fp32 activations once m is large enough for a
/// matmul (docs/engine.md, "CPU matmuls").
enum class Bf16Matmul {
  kExact,  // fp32 products of fp32 x and the bf16 weights, accumulated in fp32: the reference
  kRound,  // x rounded to bf16 first, as PyTorch and llama.cpp do: ~2x faster without AMX
};

/// y[m, n] = sum_k x[m, k] * w[n, k] + bias[n].
/// x: [m, k] fp32 row-major. w: [n, k] row-major in w_dtype (f32, bf16 or f16), the layout of a
/// torch nn.Linear weight, read in place (it may be an mmap of the checkpoint). bias: [n] fp32 or
/// null. y: [m, n] fp32, must not alias x. Accumulates in fp32. `bf16` applies to bf16 weights in
/// the oneDNN path (a build without it multiplies exactly at every m).
void linear(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
            const float* bias, float* y, ThreadPool& pool, Bf16Matmul bf16 = Bf16Matmul::kExact);

}  // namespace pagoda::cpu
