#pragma once
// Scalar conversions of the 8- and 4-bit float formats of quantized checkpoints and KV caches.
// Decoding is exact (every code is a float); encoding rounds to nearest, ties to even, and
// saturates to the largest finite value as vLLM's kernels do (they clamp before converting).
// Bulk conversions build tables from these (kernels/cpu/quant_dequant.h).
//
//   float8_e4m3fn   s eeee mmm   bias 7; exponent 0: subnormal m/8 * 2^-6; s 1111 111 is NaN (no
//                                inf). 0x38 = 1.0, 0x7e = 448 (the largest), 0x01 = 2^-9.
//   float8_e5m2     s eeeee mm   bias 15, IEEE-like: exponent 31 is inf/NaN. 0x3c = 1.0,
//                                0x7b = 57344 (the largest finite), 0x01 = 2^-16.
//   float4_e2m1     s ee m       bias 1, no inf/NaN: codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6.
//   float8_e8m0     eeeeeeee     a power of two 2^(e - 127) (OCP MX block scales); 0xff is NaN.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace pagoda {

/// The largest finite values.
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr float kE2M1Max = 6.0f;

[[nodiscard]] inline float e4m3_to_float(uint8_t b) {
  const float sign = (b & 0x80) != 0 ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(static_cast<float>(8 + mant), exp - 10);
}

[[nodiscard]] inline float e5m2_to_float(uint8_t b) {
  const float sign = (b & 0x80) != 0 ? -1.0f : 1.0f;
  const int exp = (b >> 2) & 0x1f;
  const int mant = b & 0x3;
  if (exp == 0x1f)
    return mant == 0 ? sign * std::numeric_limits<float>::infinity()
                     : std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -16);
  return sign * std::ldexp(static_cast<float>(4 + mant), exp - 17);
}

[[nodiscard]] inline float e2m1_to_float(uint8_t nibble) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kValues[nibble & 0x7];
  return (nibble & 0x8) != 0 ? -v : v;
}

[[nodiscard]] inline float e8m0_to_float(uint8_t b) {
  if (b == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(b) - 127);
}

namespace detail {

/// Rounds |a| (finite, <= the format's max) to a float format with `mant_bits` mantissa bits,
/// exponent bias `bias` and subnormals below 2^(1 - bias); returns the code without its sign.
/// Example (e4m3, 3 bits, bias 7): a = 0.3 = 1.2 * 2^-2: the mantissa 0.2 * 8 = 1.6 rounds to 2,
/// exponent field -2 + 7 = 5: code 0b0101'010 = 0x2a (= 1.25 * 2^-2 = 0.3125).
[[nodiscard]] inline uint8_t encode_magnitude(float a, int mant_bits, int bias) {
  const float min_normal = std::ldexp(1.0f, 1 - bias);
  if (a < min_normal) {
    // Subnormal: a multiple of 2^(1 - bias - mant_bits); nearbyint rounds half to even. A result
    // of 2^mant_bits is the smallest normal, whose code is exactly that integer.
    return static_cast<uint8_t>(std::nearbyint(std::ldexp(a, bias - 1 + mant_bits)));
  }
  const uint32_t bits = std::bit_cast<uint32_t>(a);
  int exp = static_cast<int>(bits >> 23) - 127;
  const int drop = 23 - mant_bits;
  uint32_t mant = (bits & 0x7fffffu) >> drop;
  const uint32_t rest = bits & ((1u << drop) - 1);
  const uint32_t half = 1u << (drop - 1);
  if (rest > half || (rest == half && (mant & 1u) != 0)) ++mant;
  if (mant == (1u << mant_bits)) {
    mant = 0;
    ++exp;
  }
  return static_cast<uint8_t>(static_cast<uint32_t>(exp + bias) << mant_bits | mant);
}

}  // namespace detail

/// float -> float8_e4m3fn, saturating to +-448; NaN stays NaN.
[[nodiscard]] inline uint8_t float_to_e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return 0x7f;
  const float a = std::fmin(std::fabs(f), kE4M3Max);
  return sign | detail::encode_magnitude(a, 3, 7);
}

/// float -> float8_e5m2, saturating to +-57344 (inf included); NaN stays NaN.
[[nodiscard]] inline uint8_t float_to_e5m2(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return 0x7f;
  const float a = std::fmin(std::fabs(f), kE5M2Max);
  return sign | detail::encode_magnitude(a, 2, 15);
}

/// float -> float4_e2m1 (a nibble), saturating to +-6.
[[nodiscard]] inline uint8_t float_to_e2m1(float f) {
  const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
  const float a = std::fmin(std::fabs(f), kE2M1Max);
  return sign | detail::encode_magnitude(a, 1, 1);
}

}  // namespace pagoda
