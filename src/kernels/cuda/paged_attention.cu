// paged_attention: the choice of kernel, validation and the two attention launches (the split-KV
// merge runs inside them: finish_split in attention_kernel.cuh).
#include "kernels/cuda/attention_hopper.h"
#include "kernels/cuda/attention_kernel.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_attention.h"

namespace pagoda::cuda {
cudaError_t paged_attention(const PagedAttentionParams& params, const AttentionPlan& plan,
                            const AttentionLimits& limits, void* workspace, cudaStream_t stream) {
  const KVCacheLayout& L = params.layout;
  if (params.num_tokens <= 0) return cudaSuccess;
  KVCode code = KVCode::kNone;
  if (!kv_code_of(params.kv_dtype, params.dtype, &code)) return cudaErrorNotSupported;
  if (L.num_kv_heads <= 0 || params.num_heads % L.num_kv_heads != 0 ||
      L.head_dim != limits.head_dim || params.num_tokens > limits.max_tokens ||
      (params.dtype != DType::kBF16 && params.dtype != DType::kF16))
    return cudaErrorInvalidValue;
  // The fast kernel needs its tile shapes and 16-byte rows of q; the general one takes the rest.
  // A plan made for a general shape has no splits, so the fast kernel may still run it.
  if (!attention_fast_kernel_supports(L.head_dim, L.block_size) || params.softcap > 0 ||
      params.num_heads / L.num_kv_heads > kAttentionTileRows || params.q_stride % 8 != 0 ||
      !aligned16(params.q))
    return paged_attention_general(params, stream);
  const AttentionWorkspaceSections sec = attention_workspace_sections(limits);
  auto* base = static_cast<char*>(workspace);
  attention::KernelArgs args{};
  args.p = params;
  args.counts = reinterpret_cast<const int32_t*>(base);
  args.items = reinterpret_cast<const AttentionWorkItem*>(base + sec.items);
  args.token_info = reinterpret_cast<const AttentionTokenInfo*>(base + sec.token_info);
  args.split_counters = reinterpret_cast<int32_t*>(base + sec.counters);
  args.partial_lse = reinterpret_cast<float*>(base + sec.lse);
  args.partial_out = reinterpret_cast<float*>(base + sec.out);
  args.group = params.num_heads / L.num_kv_heads;
  args.block_size_div = FastDivmod(static_cast<uint32_t>(L.block_size));
  args.kv_code = code;
  if (cudaError_t e = attention::launch_decode(args, plan.decode_grid, stream); e != cudaSuccess)
    return e;
#ifdef PAGODA_HOPPER_ATTENTION
  if (plan.prefill_rows == kAttentionTileRows && !plan.prefill_split && params.hopper &&
      plan.prefill_grid > 0 && attention::hopper_prefill_supports(params))
    return attention::launch_prefill_hopper(args, plan.prefill_grid, stream);
#endif
  return plan.prefill_rows == kAttentionSmallTileRows
             ? attention::launch_prefill_small(args, plan.prefill_grid, stream)
             : attention::launch_prefill(args, plan.prefill_grid, stream);
}

bool hopper_prefill_available(const KVCacheLayout& layout, DType dtype, DType kv_dtype,
                              float softcap) {
#ifdef PAGODA_HOPPER_ATTENTION
  PagedAttentionParams p{};
  p.layout = layout;
  p.dtype = dtype;
  p.kv_dtype = kv_dtype;
  p.softcap = softcap;
  static const int16_t aligned[8] = {};
  p.key_cache = p.value_cache = aligned;  // the pointers' alignment is the launch's to check
  return attention::hopper_prefill_supports(p);
#else
  (void)layout, (void)dtype, (void)kv_dtype, (void)softcap;
  return false;
#endif
}

}  // namespace pagoda::cuda
