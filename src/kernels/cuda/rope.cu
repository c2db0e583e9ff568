// rope_and_cache: one block per token. Threads walk the (head, pair) grid of q then k, so each
// rotation reads and writes both halves of a pair; the angle's sincosf is full precision because
// positions reach 1e5 and the fast intrinsics lose accuracy on large arguments.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.h"

namespace pagoda::cuda {
namespace {

template <typename T>
__global__ void rope_and_cache_kernel(RopeCacheParams p) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x;
  const int d = p.layout.head_dim, half = d / 2, kvh = p.layout.num_kv_heads;
  const float pos = static_cast<float>(p.positions[t]);
  const int64_t slot = p.slot_mapping[t];
  T* q = static_cast<T*>(p.q) + t * p.q_stride;
  T* k = static_cast<T*>(p.k) + t * p.k_stride;
  const T* v = static_cast<const T*>(p.v) + t * p.v_stride;
  T* kc = static_cast<T*>(p.key_cache);
  T* vc = static_cast<T*>(p.value_cache);

  const int q_pairs = p.num_heads * half, k_pairs = kvh * half;
  for (int i = threadIdx.x; i < q_pairs + k_pairs; i += blockDim.x) {
    const bool is_q = i < q_pairs;
    const int j = is_q ? i : i - q_pairs;
    const int h = j / half, e = j % half;
    float s, c;
    sincosf(pos * p.inv_freq[e], &s, &c);
    T* x = (is_q ? q : k) + h * d;
    const float a = to_float(x[e]), b = to_float(x[e + half]);
    const T ra = from_float<T>(a * c - b * s), rb = from_float<T>(b * c + a * s);
    x[e] = ra;
    x[e + half] = rb;
    if (!is_q && slot >= 0) {
      const int64_t off = kv_cache_offset(p.layout, slot, h);
      kc[off + e] = ra;
      kc[off + e + half] = rb;
    }
  }
  if (slot >= 0) {
    for (int i = threadIdx.x; i < kvh * d; i += blockDim.x) {
      const int h = i / d, e = i % d;
      vc[kv_cache_offset(p.layout, slot, h) + e] = v[h * d + e];
    }
  }
}

}  // namespace

cudaError_t rope_and_cache(const RopeCacheParams& params, cudaStream_t stream) {
  if (params.num_tokens <= 0) return cudaSuccess;
  if (params.layout.head_dim % 2 != 0 || params.num_tokens > 0x7fffffff)
    return cudaErrorInvalidValue;
  const int pairs = (params.num_heads + params.layout.num_kv_heads) * params.layout.head_dim / 2;
  const int threads = std::min(512, std::max(32, (pairs + 31) / 32 * 32));
  PAGODA_DISPATCH_HALF(params.dtype, {
    launch_kernel(rope_and_cache_kernel<scalar_t>, static_cast<unsigned>(params.num_tokens),
                  threads, 0, stream, params);
    return cudaGetLastError();
  });
}

}  // namespace pagoda::cuda
