// RMSNorm in fp32, following Hugging Face's LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * w, with the
// mean accumulated in fp32.
#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/simd.h"

namespace pagoda::cpu {
namespace {

// Rows per task so that each thread gets at least this many elements.
constexpr int64_t kMinElementsPerTask = 16384;

float sum_squares(const float* x, int64_t n) {
#if defined(__AVX512F__)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    acc0 = _mm512_fmadd_ps(a, a, acc0);
    acc1 = _mm512_fmadd_ps(b, b, acc1);
  }
  for (; i < n; i += 16) {
    const __m512 a = _mm512_maskz_loadu_ps(simd::tail_mask(n - i), x + i);
    acc0 = _mm512_fmadd_ps(a, a, acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#else
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += x[i] * x[i];
  return acc;
#endif
}

// out = x * inv_rms * w; written so the compiler vectorises it (no reduction).
void scale_row(const float* x, const float* w, int64_t n, float inv_rms, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv_rms * w[i];
}

float inverse_rms(const float* x, int64_t n, float eps) {
  const float mean = sum_squares(x, n) / static_cast<float>(n);
  return 1.0f / std::sqrt(mean + eps);
}

}  // namespace

void rms_norm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* out,
              ThreadPool& pool) {
  if (rows <= 0 || n <= 0) return;
  pool.parallel_for(rows, std::max<int64_t>(1, kMinElementsPerTask / n),
                    [&](int64_t r0, int64_t r1) {
                      for (int64_t r = r0; r < r1; ++r) {
                        const float* xr = x + r * n;
                        scale_row(xr, weight, n, inverse_rms(xr, n, eps), out + r * n);
                      }
                    });
}

void add_rms_norm(float* residual, const float* x, const float* weight, int64_t rows, int64_t n,
                  float eps, float* out, ThreadPool& pool) {
  if (rows <= 0 || n <= 0) return;
  pool.parallel_for(rows, std::max<int64_t>(1, kMinElementsPerTask / n),
                    [&](int64_t r0, int64_t r1) {
                      for (int64_t r = r0; r < r1; ++r) {
                        float* res = residual + r * n;
                        const float* xr = x + r * n;
                        for (int64_t i = 0; i < n; ++i) res[i] += xr[i];
                        scale_row(res, weight, n, inverse_rms(res, n, eps), out + r * n);
                      }
                    });
}

}  // namespace pagoda::cpu
