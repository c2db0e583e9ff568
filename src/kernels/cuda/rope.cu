// rope_and_cache: one block per token. Threads walk the (head, pair) grid of q then k, so each
// rotation reads and writes both halves of a pair; the angle's sincosf is full precision because
// positions reach 1e5 and the fast intrinsics lose accuracy on large arguments. With the per-head
// norm (Qwen3), a warp per head first finds each q and k head's 1/rms (kept in shared memory):
// the norm then costs one extra read of q and k instead of three copies and two kernels.
// A quantized cache (kv_quant.cuh) receives the code of the dtype-rounded value / its scale.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/cuda/rope.h"

namespace pagoda::cuda {
namespace {

// Stores x (a value of T) at element i of a cache of T, or its code of x / scale.
template <typename T>
__device__ __forceinline__ void store_cached(void* cache, int64_t i, T x, KVCode code,
                                             float scale) {
  if (code == KVCode::kNone) {
    static_cast<T*>(cache)[i] = x;
  } else {
    static_cast<uint8_t*>(cache)[i] = float_to_kv_code(to_float(x) / scale, code);
  }
}

template <typename T, bool kNorm>
__global__ void rope_and_cache_kernel(RopeCacheParams p, KVCode code) {
  extern __shared__ float inv_rms[];  // kNorm: [num_heads + num_kv_heads]
  begin_dependent_kernel();
  const int64_t t = blockIdx.x;
  const int d = p.layout.head_dim, half = d / 2, kvh = p.layout.num_kv_heads;
  const float pos = static_cast<float>(p.positions[t]);
  const int64_t slot = p.slot_mapping[t];
  T* q = static_cast<T*>(p.q) + t * p.q_stride;
  T* k = static_cast<T*>(p.k) + t * p.k_stride;
  const T* v = static_cast<const T*>(p.v) + t * p.v_stride;
  const float k_scale = code != KVCode::kNone ? kv_scale_or_one(p.k_scale) : 1.0f;
  const float v_scale = code != KVCode::kNone ? kv_scale_or_one(p.v_scale) : 1.0f;

  if constexpr (kNorm) {
    const int lane = threadIdx.x & 31, warps = static_cast<int>(blockDim.x >> 5);
    for (int h = static_cast<int>(threadIdx.x >> 5); h < p.num_heads + kvh; h += warps) {
      const T* x = h < p.num_heads ? q + h * d : k + (h - p.num_heads) * d;
      float ss = 0.0f;
      for (int e = lane; e < d; e += 32) ss += to_float(x[e]) * to_float(x[e]);
      ss = warp_sum(ss);
      if (lane == 0) inv_rms[h] = rsqrtf(ss / static_cast<float>(d) + p.norm_eps);
    }
    __syncthreads();
  }
  const int q_pairs = p.num_heads * half, k_pairs = kvh * half;
  for (int i = threadIdx.x; i < q_pairs + k_pairs; i += blockDim.x) {
    const bool is_q = i < q_pairs;
    const int j = is_q ? i : i - q_pairs;
    const int h = j / half, e = j % half;
    float s, c;
    sincosf(pos * p.inv_freq[e], &s, &c);
    T* x = (is_q ? q : k) + h * d;
    float a = to_float(x[e]), b = to_float(x[e + half]);
    if constexpr (kNorm) {  // as rms_norm writes it: x * inv_rms * weight, rounded to dtype
      const T* w = static_cast<const T*>(is_q ? p.q_norm : p.k_norm);
      const float inv = inv_rms[is_q ? h : p.num_heads + h];
      a = to_float(from_float<T>(a * inv * to_float(w[e])));
      b = to_float(from_float<T>(b * inv * to_float(w[e + half])));
    }
    const T ra = from_float<T>(a * c - b * s), rb = from_float<T>(b * c + a * s);
    x[e] = ra;
    x[e + half] = rb;
    if (!is_q && slot >= 0) {
      const int64_t off = kv_cache_offset(p.layout, slot, h);
      store_cached(p.key_cache, off + e, ra, code, k_scale);
      store_cached(p.key_cache, off + e + half, rb, code, k_scale);
    }
  }
  if (slot >= 0) {
    for (int i = threadIdx.x; i < kvh * d; i += blockDim.x) {
      const int h = i / d, e = i % d;
      store_cached(p.value_cache, kv_cache_offset(p.layout, slot, h) + e, v[h * d + e], code,
                   v_scale);
    }
  }
}

}  // namespace

cudaError_t rope_and_cache(const RopeCacheParams& params, cudaStream_t stream) {
  if (params.num_tokens <= 0) return cudaSuccess;
  const bool norm = params.q_norm != nullptr;
  if (params.layout.head_dim % 2 != 0 || params.num_tokens > 0x7fffffff ||
      norm != (params.k_norm != nullptr))
    return cudaErrorInvalidValue;
  KVCode code = KVCode::kNone;
  if (!kv_code_of(params.cache_dtype, params.dtype, &code)) return cudaErrorNotSupported;
  const int pairs = (params.num_heads + params.layout.num_kv_heads) * params.layout.head_dim / 2;
  const int threads = std::min(512, std::max(32, (pairs + 31) / 32 * 32));
  const size_t smem =
      norm ? sizeof(float) * static_cast<size_t>(params.num_heads + params.layout.num_kv_heads) : 0;
  PAGODA_DISPATCH_HALF(params.dtype, {
    if (norm) {
      launch_kernel(rope_and_cache_kernel<scalar_t, true>, static_cast<unsigned>(params.num_tokens),
                    threads, smem, stream, params, code);
    } else {
      launch_kernel(rope_and_cache_kernel<scalar_t, false>,
                    static_cast<unsigned>(params.num_tokens), threads, 0, stream, params, code);
    }
    return cudaGetLastError();
  });
}

}  // namespace pagoda::cuda
