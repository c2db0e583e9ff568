#pragma once
// The quantized KV cache's element codes on the GPU (--kv-cache-dtype fp8_e4m3, fp8_e5m2, int8).
//
// A quantized cache holds one byte per element: the code of x / scale, with one scale per layer
// for the keys and one for the values (PagedAttentionParams::k_scale / v_scale). Encoding rounds to
// nearest, ties to even, and saturates as the CPU does (core/fp8.h; int8: rint, clamped to
// [-127, 127], NaN -> 0). Every code is exactly a bf16 and an f16 (e4m3: 3 mantissa bits, 2^-9 ..
// 448; e5m2: 2 bits, 2^-16 .. 57344; int8: integers <= 127), so the attention kernels convert a
// tile of codes to the activation dtype without rounding and fold the scales in elsewhere:
// q.(s_k c_k) = s_k (q.c_k) joins the softmax scale, and sum_j p_j (s_v c_v,j) = s_v sum_j p_j
// c_v,j scales the output.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"

namespace pagoda::cuda {

enum class KVCode : int32_t { kNone = 0, kE4M3, kE5M2, kI8 };

/// The code of a cache dtype next to activations of `act`: kNone for act itself; false for a dtype
/// the kernels do not store.
inline bool kv_code_of(DType cache, DType act, KVCode* code) {
  switch (cache) {
    case DType::kF8E4M3:
      *code = KVCode::kE4M3;
      return true;
    case DType::kF8E5M2:
      *code = KVCode::kE5M2;
      return true;
    case DType::kI8:
      *code = KVCode::kI8;
      return true;
    default:
      *code = KVCode::kNone;
      return cache == act;
  }
}

/// x (already divided by the scale) -> its one-byte code.
__device__ __forceinline__ uint8_t float_to_kv_code(float x, KVCode code) {
  switch (code) {
    case KVCode::kE4M3:
      return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
    case KVCode::kE5M2:
      return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2));
    default: {
      if (isnan(x)) return 0;
      const float r = rintf(fminf(fmaxf(x, -127.0f), 127.0f));
      return static_cast<uint8_t>(static_cast<int8_t>(r));
    }
  }
}

/// A code -> its value (exact).
__device__ __forceinline__ float kv_code_to_float(uint8_t c, KVCode code) {
  if (code == KVCode::kI8) return static_cast<float>(static_cast<int8_t>(c));
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c),
                                               code == KVCode::kE4M3 ? __NV_E4M3 : __NV_E5M2);
  return __half2float(__half(h));
}

/// Two codes (the low byte first) -> two T packed as one mma fragment register (exact).
template <typename T>
__device__ __forceinline__ uint32_t kv_codes_to_pair(uint32_t two, KVCode code) {
  if (code == KVCode::kI8) {
    return pack2<T>(static_cast<float>(static_cast<int8_t>(two & 0xffu)),
                    static_cast<float>(static_cast<int8_t>((two >> 8) & 0xffu)));
  }
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu),
                                                   code == KVCode::kE4M3 ? __NV_E4M3 : __NV_E5M2);
  if constexpr (std::is_same_v<T, __half>) {
    return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
  } else {
    const float2 f = __half22float2(__half2(h));
    return pack2<T>(f.x, f.y);
  }
}

/// 16 codes -> 16 T at dst (16-byte aligned): two 16-byte stores.
template <typename T>
__device__ __forceinline__ void kv_codes_to_row16(const uint4& c, KVCode code, T* dst) {
  const uint32_t w[4] = {c.x, c.y, c.z, c.w};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = kv_codes_to_pair<T>(w[i], code);
    out[2 * i + 1] = kv_codes_to_pair<T>(w[i] >> 16, code);
  }
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(out[0], out[1], out[2], out[3]);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(out[4], out[5], out[6], out[7]);
}

/// A layer's scale: *scale, or 1 where none is given.
__device__ __forceinline__ float kv_scale_or_one(const float* scale) {
  return scale != nullptr ? *scale : 1.0f;
}

}  // namespace pagoda::cuda
