// paged_attention_general: the attention path for every shape the mma.sync kernel does not take
// (head dims other than 64 / 128, block sizes that are not a multiple of 16, unaligned q).
//
// Why this shape: the models that need it are small (stories260K: head_dim 8; test fixtures:
// 16, 24, ...), so simplicity and exactness beat speed. One warp owns one (token, query head) row;
// lane i holds dims i, i + 32, ... of q and of the output accumulator (kPerLane = ceil(D / 32)
// registers), and the warp walks the row's keys one position at a time through the block table:
// a 2-byte load per lane, a warp-sum for the score, an fp32 online-softmax update (exp2 with the
// scale folded in). Nothing is read from the plan or workspace and the grid depends only on
// num_tokens * num_heads, so a CUDA graph captures it like the fast path; the sequence of a token
// is found by binary search in query_start_loc. A quantized cache (one-byte codes) is read by the
// same walk: the key scale joins q's, the value scale the final 1 / l.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/cuda/paged_attention.h"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 4;  // rows per block
constexpr float kLog2e = 1.4426950408889634f;

// Element i of a cache of T (code kNone) or of one-byte codes.
template <typename T>
__device__ __forceinline__ float cache_value(const void* cache, int64_t i, KVCode code) {
  if (code == KVCode::kNone) return to_float(static_cast<const T*>(cache)[i]);
  return kv_code_to_float(static_cast<const uint8_t*>(cache)[i], code);
}

template <typename T, int kPerLane>
__global__ void __launch_bounds__(kWarps * 32)
    general_attention_kernel(PagedAttentionParams p, KVCode code) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= p.num_tokens * p.num_heads) return;  // whole warps exit: shuffles stay full
  const int64_t t = row / p.num_heads;
  const int h = static_cast<int>(row % p.num_heads);
  const KVCacheLayout& L = p.layout;
  const int d = L.head_dim;
  const int kv_head = h / (p.num_heads / L.num_kv_heads);
  T* out = static_cast<T*>(p.out) + row * d;

  // The sequence of token t: the last s with query_start_loc[s] <= t.
  int lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.query_start_loc[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int s = lo;
  int first = 0, last = -1;  // key positions [first, last]; empty: the row is zeros (as the CPU)
  if (p.num_seqs > 0 && p.query_start_loc[s] <= t && t < p.query_start_loc[s + 1]) {
    const int pos = p.positions[t];
    last = min(pos, p.seq_lens[s] - 1);
    first = p.sliding_window > 0 ? max(0, pos - p.sliding_window + 1) : 0;
  }

  const T* q = static_cast<const T*>(p.q) + t * p.q_stride + static_cast<int64_t>(h) * d;
  const bool quant = code != KVCode::kNone;
  // Scores in log2 units (exp2 below), with a quantized cache's key scale.
  const float q_scale = p.scale * kLog2e * (quant ? kv_scale_or_one(p.k_scale) : 1.0f);
  const float v_scale = quant ? kv_scale_or_one(p.v_scale) : 1.0f;
  float qf[kPerLane], acc[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = lane + 32 * j;
    qf[j] = e < d ? to_float(q[e]) * q_scale : 0.0f;
    acc[j] = 0.0f;
  }
  const int32_t* table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;
  float m = -INFINITY, l = 0.0f;
  for (int key = first; key <= last; ++key) {
    const int64_t block = table[key / L.block_size];
    const int64_t base =
        ((block * L.num_kv_heads + kv_head) * L.block_size + key % L.block_size) * d;
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < d) dot = fmaf(qf[j], cache_value<T>(p.key_cache, base + e, code), dot);
    }
    float score = warp_sum(dot);  // every lane holds it
    if (p.softcap > 0) score = p.softcap * tanhf(score / (p.softcap * kLog2e)) * kLog2e;
    const float m_new = fmaxf(m, score);
    const float correction = exp2f(m - m_new);  // 0 on the first key (m = -inf)
    const float weight = exp2f(score - m_new);
    l = l * correction + weight;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      const float v = e < d ? cache_value<T>(p.value_cache, base + e, code) : 0.0f;
      acc[j] = fmaf(weight, v, acc[j] * correction);
    }
    m = m_new;
  }
  const float inv = l > 0.0f ? v_scale / l : 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = lane + 32 * j;
    if (e < d) out[e] = from_float<T>(acc[j] * inv);
  }
}

// The one dispatch point of the family: registers per lane for D <= 32, 64, 128, 256.
template <typename T>
cudaError_t launch(const PagedAttentionParams& p, KVCode code, unsigned blocks,
                   cudaStream_t stream) {
  const int d = p.layout.head_dim;
  if (d <= 32)
    general_attention_kernel<T, 1><<<blocks, kWarps * 32, 0, stream>>>(p, code);
  else if (d <= 64)
    general_attention_kernel<T, 2><<<blocks, kWarps * 32, 0, stream>>>(p, code);
  else if (d <= 128)
    general_attention_kernel<T, 4><<<blocks, kWarps * 32, 0, stream>>>(p, code);
  else
    general_attention_kernel<T, 8><<<blocks, kWarps * 32, 0, stream>>>(p, code);
  return cudaGetLastError();
}

}  // namespace

cudaError_t paged_attention_general(const PagedAttentionParams& params, cudaStream_t stream) {
  const KVCacheLayout& L = params.layout;
  if (params.num_tokens <= 0 || params.num_heads <= 0) return cudaSuccess;
  if (L.num_kv_heads <= 0 || params.num_heads % L.num_kv_heads != 0 || L.block_size <= 0 ||
      L.head_dim <= 0 || L.head_dim > kGeneralAttentionMaxHeadDim ||
      params.q_stride < static_cast<int64_t>(params.num_heads) * L.head_dim)
    return cudaErrorInvalidValue;
  KVCode code = KVCode::kNone;
  if (!kv_code_of(params.kv_dtype, params.dtype, &code)) return cudaErrorNotSupported;
  const int64_t blocks = (params.num_tokens * params.num_heads + kWarps - 1) / kWarps;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  PAGODA_DISPATCH_HALF(params.dtype, {
    return launch<scalar_t>(params, code, static_cast<unsigned>(blocks), stream);
  });
}

}  // namespace pagoda::cuda
