#pragma once
// The element codes of a quantized or 16-bit KV cache on the CPU: writing a K or V row quantizes
// it, attention dequantizes the rows it reads into fp32 before the same float arithmetic as the
// fp32 cache (kernels/cpu/paged_attention.cc).
//
//   f8e4m3, f8e5m2  code = fp8(x / scale): saturated to the format's largest finite value
//                   (448, 57344), rounded to nearest, ties to even (core/fp8.h); x = code * scale
//   i8              code = round_half_even(clamp(x / scale, -127, 127)): symmetric, -128 unused,
//                   so that -code is always a code; x = code * scale
//   bf16, f16       code = the nearest 16-bit float (ties to even); x = code (the scale is 1)
//   f32             the value itself
//
// Example (f8e4m3, scale 0.5): x = 0.3 -> 0.3 / 0.5 = 0.6 = 1.2 * 2^-1 -> mantissa 0.2 * 8 = 1.6
// rounds to 2: code 0x32 (1.25 * 2^-1 = 0.625), read back as 0.625 * 0.5 = 0.3125.
#include <cstdint>

#include "core/dtype.h"

namespace pagoda::cpu {

/// Whether dtype is a cache element type these functions handle (f32, bf16, f16, f8e4m3, f8e5m2,
/// i8).
[[nodiscard]] bool kv_cache_dtype_supported(DType dtype);

/// dst[0, n) = codes of x[0, n) (dst: n elements of dtype). scale > 0; 1 for 16- and 32-bit.
void quantize_kv_row(const float* x, int64_t n, DType dtype, float scale, void* dst);

/// dst[0, n) = src's n codes of dtype, each multiplied by scale (one fp32 product per element,
/// exact for every fp8 and int8 code times a scale whose product does not round).
void dequantize_kv_row(const void* src, int64_t n, DType dtype, float scale, float* dst);

}  // namespace pagoda::cpu
