// paged_attention: the choice of kernel, validation, the two attention launches and the split-KV
// combine.
#include "kernels/cuda/attention_kernel.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_attention.h"

namespace pagoda::cuda {
namespace {

constexpr int kCombineWarps = 4;

// One warp per (token, head) row of a split tile: out = sum_s 2^(lse_s - max) O_s / sum_s 2^(...).
template <typename T>
__global__ void combine_kernel(PagedAttentionParams p, const AttentionTokenInfo* token_info,
                               const float* partial_lse, const float* partial_out, int group) {
  begin_dependent_kernel();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kCombineWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= p.num_tokens * p.num_heads) return;
  const int64_t t = row / p.num_heads;
  const int h = static_cast<int>(row % p.num_heads);
  const AttentionTokenInfo info = token_info[t];
  if (info.num_splits <= 1) return;  // the attention kernel wrote this row
  const int d = p.layout.head_dim;
  const int r = static_cast<int>(t - info.tile_begin) * group + h % group;
  const int64_t slot0 = info.first_slot + static_cast<int64_t>(h / group) * info.num_splits;
  float big = -INFINITY;
  for (int s = 0; s < info.num_splits; ++s)
    big = fmaxf(big, partial_lse[(slot0 + s) * kAttentionTileRows + r]);
  T* out = static_cast<T*>(p.out) + row * d;
  for (int i = lane * 4; i < d; i += 128) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, wsum = 0.0f;
    for (int s = 0; s < info.num_splits; ++s) {
      const float lse = partial_lse[(slot0 + s) * kAttentionTileRows + r];
      const float w = big == -INFINITY ? 0.0f : exp2f(lse - big);
      wsum += w;
      if (w == 0.0f) continue;
      const float4 v = *reinterpret_cast<const float4*>(
          partial_out + ((slot0 + s) * kAttentionTileRows + r) * d + i);
      acc[0] += w * v.x;
      acc[1] += w * v.y;
      acc[2] += w * v.z;
      acc[3] += w * v.w;
    }
    const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) out[i + j] = from_float<T>(acc[j] * inv);
  }
}

}  // namespace

cudaError_t paged_attention(const PagedAttentionParams& params, const AttentionPlan& plan,
                            const AttentionLimits& limits, void* workspace, cudaStream_t stream) {
  const KVCacheLayout& L = params.layout;
  if (params.num_tokens <= 0) return cudaSuccess;
  if (L.num_kv_heads <= 0 || params.num_heads % L.num_kv_heads != 0 ||
      L.head_dim != limits.head_dim || params.num_tokens > limits.max_tokens ||
      (params.dtype != DType::kBF16 && params.dtype != DType::kF16))
    return cudaErrorInvalidValue;
  // The fast kernel needs its tile shapes and 16-byte rows of q; the general one takes the rest.
  // A plan made for a general shape has no splits, so the fast kernel may still run it.
  if (!attention_fast_kernel_supports(L.head_dim, L.block_size) ||
      params.num_heads / L.num_kv_heads > kAttentionTileRows || params.q_stride % 8 != 0 ||
      !aligned16(params.q))
    return paged_attention_general(params, stream);
  const AttentionWorkspaceSections sec = attention_workspace_sections(limits);
  auto* base = static_cast<char*>(workspace);
  attention::KernelArgs args{};
  args.p = params;
  args.counts = reinterpret_cast<const int32_t*>(base);
  args.items = reinterpret_cast<const AttentionWorkItem*>(base + sec.items);
  args.partial_lse = reinterpret_cast<float*>(base + sec.lse);
  args.partial_out = reinterpret_cast<float*>(base + sec.out);
  args.group = params.num_heads / L.num_kv_heads;
  if (cudaError_t e = attention::launch_decode(args, plan.decode_grid, stream); e != cudaSuccess)
    return e;
  if (cudaError_t e = attention::launch_prefill(args, plan.prefill_grid, stream); e != cudaSuccess)
    return e;
  if (!plan.combine) return cudaSuccess;
  const int64_t rows = params.num_tokens * params.num_heads;
  const auto blocks = static_cast<unsigned>((rows + kCombineWarps - 1) / kCombineWarps);
  const auto* info = reinterpret_cast<const AttentionTokenInfo*>(base + sec.token_info);
  PAGODA_DISPATCH_HALF(params.dtype, {
    launch_kernel(combine_kernel<scalar_t>, blocks, kCombineWarps * 32, 0, stream, params, info,
                  args.partial_lse, args.partial_out, args.group);
    return cudaGetLastError();
  });
}

}  // namespace pagoda::cuda
