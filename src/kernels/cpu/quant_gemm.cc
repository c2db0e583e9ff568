// How it works. dequant_matmul splits W's n rows over the pool's threads; each thread walks its
// rows a tile of T at a time (T * k fp32 about 64 KiB, so the tile stays in L2), has the format
// write the tile's rows as fp32 (DequantizeRows) and computes the tile's columns of y for every
// row of x, four weight rows per pass so that each x load feeds four accumulators. The tile is
// dequantized once per call whatever m is, so decode (m = 1) pays one dequantization per weight
// element, as a GPU dequantizing in registers does, and prefill amortises it over m.
//
// int8_matmul: per (row i of x, row j of W) an exact int32 dot. With AVX-512 VNNI, vpdpbusd
// multiplies unsigned by signed bytes, so x is offset to u = x + 128 (0..255):
//   sum u * w = sum x * w + 128 * sum w   =>   sum x * w = vpdpbusd(u, w) - 128 * w_row_sums[j].
// Example: x = (-1, 2), w = (3, -4): u = (127, 130), sum u * w = 381 - 520 = -139, sum w = -1,
// -139 - 128 * (-1) = -11 = (-1 * 3) + (2 * -4).
#include "kernels/cpu/quant_gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/fp8.h"
#include "kernels/cpu/simd.h"

namespace pagoda::cpu {
namespace {

// dot(a, b) over k floats, for four b rows at once: out[r] = sum_l a[l] * b[r][l].
inline void dot4(const float* a, const float* b0, const float* b1, const float* b2, const float* b3,
                 int64_t k, float* out) {
#if defined(__AVX512F__)
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(),
         s3 = _mm512_setzero_ps();
  for (int64_t l = 0; l < k; l += 16) {
    const __mmask16 mask = simd::tail_mask(k - l);
    const __m512 x = _mm512_maskz_loadu_ps(mask, a + l);
    s0 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(mask, b0 + l), s0);
    s1 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(mask, b1 + l), s1);
    s2 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(mask, b2 + l), s2);
    s3 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(mask, b3 + l), s3);
  }
  out[0] = _mm512_reduce_add_ps(s0);
  out[1] = _mm512_reduce_add_ps(s1);
  out[2] = _mm512_reduce_add_ps(s2);
  out[3] = _mm512_reduce_add_ps(s3);
#else
  float s[4] = {0, 0, 0, 0};
  for (int64_t l = 0; l < k; ++l) {
    s[0] += a[l] * b0[l];
    s[1] += a[l] * b1[l];
    s[2] += a[l] * b2[l];
    s[3] += a[l] * b3[l];
  }
  for (int r = 0; r < 4; ++r) out[r] = s[r];
#endif
}

inline float dot1(const float* a, const float* b, int64_t k) {
  float out[4];
  dot4(a, b, b, b, b, k, out);
  return out[0];
}

// Exact int32 dot of k int8 pairs (see the note at the top for the VNNI offset).
inline int32_t dot_i8(const int8_t* x, const int8_t* w, int64_t k, int32_t w_sum) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i acc = _mm512_setzero_si512();
  for (int64_t l = 0; l < k; l += 64) {
    const int64_t left = k - l;
    const __mmask64 mask = left >= 64 ? ~__mmask64{0} : ((__mmask64{1} << left) - 1);
    // x + 128 as unsigned: flipping the sign bit; masked-off lanes stay 0 (contribute nothing).
    const __m512i u =
        _mm512_maskz_mov_epi8(mask, _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, x + l), offset));
    acc = _mm512_dpbusd_epi32(acc, u, _mm512_maskz_loadu_epi8(mask, w + l));
  }
  return _mm512_reduce_add_epi32(acc) - 128 * w_sum;
#else
  (void)w_sum;
  int32_t acc = 0;
  for (int64_t l = 0; l < k; ++l) acc += int32_t{x[l]} * int32_t{w[l]};
  return acc;
#endif
}

// Round half to even and saturate to int8 (vLLM's float_to_int8_rn).
inline int8_t to_int8_rn(float v) {
  const float r = std::nearbyint(v);
  return static_cast<int8_t>(std::clamp(r, -128.0f, 127.0f));
}

}  // namespace

void dequant_matmul(const float* x, int64_t m, int64_t k, int64_t n, const DequantizeRows& rows,
                    float* y, int64_t ldy, ThreadPool& pool) {
  if (m <= 0 || n <= 0) return;
  const int64_t tile = std::clamp<int64_t>((int64_t{16} << 10) / std::max<int64_t>(k, 1), 4, 64);
  pool.parallel_for(n, tile, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;
    for (int64_t r0 = begin; r0 < end; r0 += tile) {
      const int64_t r1 = std::min(end, r0 + tile);
      const int64_t t = r1 - r0;
      scratch.resize(static_cast<size_t>(t * k));
      rows(r0, r1, scratch.data());
      const float* w = scratch.data();
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * k;
        float* yi = y + i * ldy + r0;
        int64_t j = 0;
        for (; j + 4 <= t; j += 4)
          dot4(xi, w + j * k, w + (j + 1) * k, w + (j + 2) * k, w + (j + 3) * k, k, yi + j);
        for (; j < t; ++j) yi[j] = dot1(xi, w + j * k, k);
      }
    }
  });
}

void int8_matmul(const Int8MatmulParams& p, ThreadPool& pool) {
  if (p.m <= 0 || p.n <= 0) return;
  const int64_t grain = std::max<int64_t>(1, (int64_t{64} << 10) / std::max<int64_t>(p.k, 1));
  pool.parallel_for(p.n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < p.m; ++i) {
      const int8_t* xi = p.qx + i * p.k;
      float* yi = p.y + i * p.ldy;
      for (int64_t j = begin; j < end; ++j) {
        const int32_t acc = dot_i8(xi, p.qw + j * p.k, p.k, p.w_row_sums[j]);
        float v = static_cast<float>(acc) * p.x_scale[i] * p.w_scale[j];
        if (p.bias != nullptr) v += p.bias[j];
        yi[j] = v;
      }
    }
  });
}

void quantize_int8_rows(const float* x, int64_t m, int64_t k, float static_scale, int8_t* qx,
                        float* x_scale) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    int8_t* qi = qx + i * k;
    if (static_scale > 0) {
      for (int64_t l = 0; l < k; ++l) qi[l] = to_int8_rn(xi[l] / static_scale);
      x_scale[i] = static_scale;
      continue;
    }
    float absmax = 0;
    for (int64_t l = 0; l < k; ++l) absmax = std::max(absmax, std::fabs(xi[l]));
    if (absmax == 0) {
      std::fill_n(qi, k, int8_t{0});
      x_scale[i] = 0;
      continue;
    }
    x_scale[i] = absmax / 127.0f;
    const float inv = 127.0f / absmax;
    for (int64_t l = 0; l < k; ++l) qi[l] = to_int8_rn(xi[l] * inv);
  }
}

void fake_quantize_fp8_rows(const float* x, int64_t m, int64_t k, float static_scale, int64_t group,
                            float* out) {
  constexpr float kMinScale = 1.0f / (kE4M3Max * 512.0f);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t g0 = 0; g0 < k; g0 += group) {
      const int64_t g1 = std::min(k, g0 + group);
      const float* xi = x + i * k;
      float* oi = out + i * k;
      float s = static_scale;
      if (!(s > 0)) {
        float absmax = 0;
        for (int64_t l = g0; l < g1; ++l) absmax = std::max(absmax, std::fabs(xi[l]));
        s = std::max(absmax / kE4M3Max, kMinScale);
      }
      for (int64_t l = g0; l < g1; ++l) oi[l] = e4m3_to_float(float_to_e4m3(xi[l] / s)) * s;
    }
  }
}

}  // namespace pagoda::cpu
