// SiLU-gated product of the Llama MLP.
#include "kernels/cpu/activation.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/simd.h"

namespace pagoda::cpu {
namespace {

constexpr int64_t kGrain =
    16384;  // elements per task: below this, threads cost more than they save

void silu_and_mul_range(const float* gate, const float* up, int64_t begin, int64_t end,
                        float* out) {
  int64_t i = begin;
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i < end; i += 16) {
    const __mmask16 mask = simd::tail_mask(end - i);
    const __m512 g = _mm512_maskz_loadu_ps(mask, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(mask, up + i);
    // exp(-g) overflows to inf for g < -88.7, and g / inf = -0, the correct limit.
    const __m512 denom = _mm512_add_ps(one, simd::exp512(_mm512_sub_ps(_mm512_setzero_ps(), g)));
    _mm512_mask_storeu_ps(out + i, mask, _mm512_mul_ps(_mm512_div_ps(g, denom), u));
  }
#endif
  for (; i < end; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_tanh_and_mul_range(const float* gate, const float* up, int64_t begin, int64_t end,
                             float* out) {
  // fp32 throughout, as PyTorch computes an fp32 tensor: 0.5 * x * (1 + tanh(k0 * (x + k1 x^3))).
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  for (int64_t i = begin; i < end; ++i) {
    const float x = gate[i];
    const float inner = kBeta * (x + kKappa * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(inner)) * up[i];
  }
}

}  // namespace

void gelu_tanh_and_mul(const float* gate, const float* up, int64_t count, float* out,
                       ThreadPool& pool) {
  pool.parallel_for(count, kGrain,
                    [&](int64_t b, int64_t e) { gelu_tanh_and_mul_range(gate, up, b, e, out); });
}

void softcap(float* x, int64_t count, float cap, ThreadPool& pool) {
  pool.parallel_for(count, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = cap * std::tanh(x[i] / cap);
  });
}

void scale(float* x, int64_t count, float factor, ThreadPool& pool) {
  pool.parallel_for(count, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] *= factor;
  });
}

void silu_and_mul(const float* gate, const float* up, int64_t count, float* out, ThreadPool& pool) {
  pool.parallel_for(count, kGrain,
                    [&](int64_t b, int64_t e) { silu_and_mul_range(gate, up, b, e, out); });
}

}  // namespace pagoda::cpu
