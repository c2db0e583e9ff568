#pragma once
// The two implementations behind cpu::linear, exposed for tests (to cover both on every shape) and
// for the benchmark (to measure where one overtakes the other). Same contract as linear().
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagoda::cpu {

/// The activation-row count up to which linear() takes the streaming path.
[[nodiscard]] int64_t linear_streaming_max_rows();

/// Streams W once over the pool's threads; meant for small m (decode).
void linear_streaming(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                      const float* bias, float* y, ThreadPool& pool);

/// OpenBLAS sgemm, bf16/f16 weights widened panel by panel; meant for large m (prefill).
void linear_blas(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                 const float* bias, float* y, ThreadPool& pool);

}  // namespace pagoda::cpu
