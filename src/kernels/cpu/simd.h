#pragma once
// Small SIMD helpers shared by the CPU kernels: a vector exp, horizontal sums and the bf16/f16 ->
// fp32 row conversions. Everything has a portable path for builds without AVX-512.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/half.h"

#if defined(__AVX512F__)
// GCC 12's own AVX-512 headers trip -Wuninitialized inside intrinsics such as _mm512_slli_epi32 and
// _mm512_reduce_add_ps (GCC bug 105593, fixed in 12.3/13). The warning is located in the intrinsic
// header, so it must be silenced before that header is first included.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace pagoda::cpu::simd {

#if defined(__AVX512F__)

/// Mask with the low `count` lanes set; count may be <= 0 (no lanes) or >= 16 (all lanes).
inline __mmask16 tail_mask(int64_t count) {
  if (count <= 0) return 0;
  return static_cast<__mmask16>(count >= 16 ? 0xffffu : (1u << count) - 1u);
}

/// exp(x) for 16 floats, within ~2 ulp of expf over the range where expf is finite. Inputs below
/// about -87.3 flush to 0 (the softmax and silu only need that side), above 88.7 give +inf.
/// Why not libmvec: it needs -ffast-math, which the rest of the kernels must not get.
inline __m512 exp512(__m512 x) {
  const __m512 kLog2e = _mm512_set1_ps(1.44269504088896341f);
  // ln2 split in a high part exact in float and a small correction (Cody-Waite).
  const __m512 kLn2Hi = _mm512_set1_ps(0.693359375f);
  const __m512 kLn2Lo = _mm512_set1_ps(-2.12194440e-4f);
  x = _mm512_min_ps(x, _mm512_set1_ps(88.72283905f));
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.33654475f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, kLog2e), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, kLn2Hi, x);
  r = _mm512_fnmadd_ps(n, kLn2Lo, r);
  // exp(r) on |r| <= ln2/2 by the Cephes expf minimax polynomial.
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // scalef multiplies by 2^n without building the exponent bits by hand, and handles n = 128
  // (overflow to inf) and deep negatives (0) correctly.
  return _mm512_scalef_ps(p, n);
}

/// Loads 16 elements of a weight row (f32, bf16 or f16) at w + index as fp32, masked.
inline __m512 load_as_f32(const void* w, DType dtype, int64_t index, __mmask16 mask) {
  switch (dtype) {
    case DType::kBF16: {
      const __m256i raw = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + index);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    }
    case DType::kF16: {
      const __m256i raw = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + index);
      return _mm512_cvtph_ps(raw);
    }
    default:
      return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w) + index);
  }
}

#endif  // __AVX512F__

/// Scalar exp for the portable paths and the tails.
inline float exp_scalar(float x) { return std::exp(x); }

/// Element i of a weight row in dtype, as fp32.
inline float load_one(const void* w, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(w)[index]);
    case DType::kF16:
      return f16_to_float(static_cast<const uint16_t*>(w)[index]);
    default:
      return static_cast<const float*>(w)[index];
  }
}

/// out[i] = float(src[i]) for i in [0, count): the bulk conversion of a weight or embedding row.
inline void convert_row(const void* src, DType dtype, int64_t count, float* out) {
  if (dtype == DType::kF32) {
    std::memcpy(out, src, static_cast<size_t>(count) * sizeof(float));
    return;
  }
#if defined(__AVX512F__)
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) _mm512_storeu_ps(out + i, load_as_f32(src, dtype, i, 0xffff));
  if (i < count) {
    const __mmask16 mask = tail_mask(count - i);
    _mm512_mask_storeu_ps(out + i, mask, load_as_f32(src, dtype, i, mask));
  }
#else
  const auto* h = static_cast<const uint16_t*>(src);
  if (dtype == DType::kBF16) {
    for (int64_t i = 0; i < count; ++i) out[i] = bf16_to_float(h[i]);
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = f16_to_float(h[i]);
  }
#endif
}

}  // namespace pagoda::cpu::simd
