#pragma once
// The two implementations behind cpu::linear, exposed for tests (to cover both on every shape) and
// for the benchmark (to measure where one overtakes the other). Same contract as linear().
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"

namespace pagoda::cpu {

/// The activation-row count up to which linear() takes the streaming path for weights in w_dtype
/// (in a build without oneDNN it takes it at every m).
[[nodiscard]] int64_t linear_streaming_max_rows(DType w_dtype);

/// Streams W once over the pool's threads; meant for small m (decode).
void linear_streaming(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                      const float* bias, float* y, ThreadPool& pool);

#ifdef PAGODA_HAVE_ONEDNN  // the build's PAGODA_ONEDNN option

/// How linear_onednn gets kExact products from bf16 weights (linear_onednn.cc has the details).
enum class Bf16Method {
  kAuto,   // kTerms on CPUs with AMX; on the others kTerms below 64 rows, kWiden from there
  kWiden,  // W widened to fp32 panel by panel, fp32 matmuls
  kTerms,  // x split exactly into three bf16 terms, one bf16 matmul over the [3m, k] stack
};

/// How linear_onednn runs; the defaults are linear()'s.
struct OnednnOptions {
  Bf16Matmul bf16 = Bf16Matmul::kExact;
  Bf16Method method = Bf16Method::kAuto;  // for kExact
  /// Products of at least this many flops (2 m n k per matmul call) get a primitive made for their
  /// m; smaller ones share one per (n, k) that takes m at run time (see linear_onednn.cc).
  int64_t fixed_m_min_flops = int64_t{1} << 26;
};

/// oneDNN matmul (linear_onednn.cc); meant for large m (prefill).
void linear_onednn(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                   const float* bias, float* y, ThreadPool& pool,
                   const OnednnOptions& options = {});

#endif  // PAGODA_HAVE_ONEDNN

}  // namespace pagoda::cpu
