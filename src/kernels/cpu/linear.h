#pragma once
// Dense projections: the GEMM/GEMV at the heart of every layer.
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagoda::cpu {

/// y[m, n] = sum_k x[m, k] * w[n, k] + bias[n].
/// x: [m, k] fp32 row-major. w: [n, k] row-major in w_dtype (f32, bf16 or f16), the layout of a
/// torch nn.Linear weight, read in place (it may be an mmap of the checkpoint). bias: [n] fp32 or
/// null. y: [m, n] fp32, must not alias x. Accumulates in fp32.
void linear(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
            const float* bias, float* y, ThreadPool& pool);

}  // namespace pagoda::cpu
