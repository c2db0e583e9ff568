// Token embedding lookup: one row conversion per token.
#include "kernels/cpu/embedding.h"

#include <algorithm>

#include "kernels/cpu/simd.h"

namespace pagoda::cpu {

void embedding(const int32_t* ids, int64_t num_tokens, const void* table, DType dtype,
               int64_t hidden, float* out, ThreadPool& pool) {
  if (num_tokens <= 0 || hidden <= 0) return;
  const auto row_bytes = static_cast<int64_t>(dtype_size(dtype)) * hidden;
  const int64_t grain = std::max<int64_t>(1, 16384 / hidden);
  pool.parallel_for(num_tokens, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const char* row = static_cast<const char*>(table) + ids[t] * row_bytes;
      simd::convert_row(row, dtype, hidden, out + t * hidden);
    }
  });
}

}  // namespace pagoda::cpu
