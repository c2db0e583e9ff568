#pragma once
// Attention over the paged KV cache on the GPU for a flat, variable-length batch: decodes, prefill
// chunks and prefills after a cached prefix in one call, with the semantics of
// cpu::paged_attention (causal by positions, GQA, sliding window).
//
// Plan / run split (FlashInfer's): plan_paged_attention runs on the host from the batch's host-
// side query_start_loc and seq_lens, and partitions the work into items (sequence, kv head, tile
// of query tokens, range of keys); upload_attention_plan copies it into a preallocated device
// workspace; paged_attention launches the kernels, which read the items from the workspace. The
// launch reads no host data but the grid sizes, so a CUDA graph may capture it: capture with
// fixed grids (AttentionPlan::decode_grid / prefill_grid set to maxima) and upload
// each step's plan before replay; blocks past the uploaded item counts exit.
//
// Two kernels: the mma.sync FlashAttention-2 kernel (attention_kernel.cuh) for the shapes of real
// checkpoints (head_dim 64 or 128, block_size a multiple of 16, 16-byte aligned q), and a simple
// warp-per-row kernel (attention_general.cu) for everything else: any head_dim from 1 to 256, any
// block_size >= 1, any GQA group (small models and test fixtures). paged_attention picks one per
// call from the layout; the general kernel ignores the plan.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/kv_cache.h"

namespace pagoda::cuda {

/// Device inputs of paged_attention. The tokens of sequence s are rows [query_start_loc[s],
/// query_start_loc[s + 1]) of q and out. Query token t of sequence s attends to the cached keys at
/// positions [max(0, positions[t] - sliding_window + 1), min(positions[t], seq_lens[s] - 1)] of
/// that sequence (rope_and_cache has written this step's keys). Logical block j of sequence s is
/// physical block block_tables[s * max_blocks_per_seq + j].
struct PagedAttentionParams {
  const void* q = nullptr;             // [num_tokens, num_heads, head_dim], token stride q_stride
  int64_t q_stride = 0;                // elements between tokens (num_heads * head_dim if dense)
  const int32_t* positions = nullptr;  // [num_tokens]
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs], tokens in the cache after this step
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  const void* key_cache = nullptr;           // KVCacheLayout, dtype
  const void* value_cache = nullptr;         // KVCacheLayout, dtype
  void* out = nullptr;                       // [num_tokens, num_heads, head_dim] dense, dtype
  int64_t num_tokens = 0;
  int num_seqs = 0;
  int num_heads = 0;  // a multiple of layout.num_kv_heads (the plan: at most 64 per kv head)
  int max_blocks_per_seq = 0;
  int sliding_window = 0;      // 0: unlimited
  float scale = 1.0f;          // usually 1/sqrt(head_dim)
  float softcap = 0.0f;        // > 0: scores s = scale * q.k become softcap * tanh(s / softcap)
                               // (Gemma-2; the general kernel runs such launches)
  KVCacheLayout layout;        // head_dim 1..256, block_size >= 1 (fast kernel: see above)
  DType dtype = DType::kBF16;  // of q and out
  // Of the caches: dtype, or one-byte codes (kF8E4M3, kF8E5M2, kI8: kv_quant.cuh) of x / scale
  // with the layer's scales below (device [1] fp32 each; null: 1). Else cudaErrorNotSupported.
  DType kv_dtype = DType::kBF16;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  // Whether 128-row prefill items may run the Hopper kernel (attention_hopper.h: sm_90a builds on
  // a compute capability 9.0 device, the shapes it takes); false keeps the FlashAttention-2 kernel
  // (tests and A/B benchmarks compare the two).
  bool hopper = true;
};

/// One block's work: query rows (token, head of this kv head) of tokens [token_begin, token_end)
/// against key positions [kv_begin, kv_end). partial_slot < 0: the block owns the whole key range
/// and writes `out`; else it writes a partial result (fp32 output and log-sum-exp) into that slot
/// of the workspace, and the last of the item's splits to finish merges them into `out`.
struct AttentionWorkItem {
  int32_t seq;
  int32_t kv_head;
  int32_t token_begin;
  int32_t token_end;
  int32_t kv_begin;
  int32_t kv_end;
  int32_t partial_slot;
  int32_t reserved;
};

/// Per query token: where the split merge finds its partials. num_splits <= 1: none.
struct AttentionTokenInfo {
  int32_t first_slot;  // slot of (kv head 0, split 0) of the token's tile
  int32_t num_splits;  // splits per kv head; slot = first_slot + (kv_head * num_splits + split) *
                       // (slots of an item: its rows / kAttentionSlotRows)
  int32_t tile_begin;  // first token of the tile (row of a token = (t - tile_begin) * group + h %
                       // group)
  int32_t reserved;
};

/// Capacity of a workspace: fixed so that its device addresses never move (graph capture).
struct AttentionLimits {
  int64_t max_tokens = 0;
  int max_items = 0;
  int max_partial_slots = 0;  // each slot holds kAttentionSlotRows rows of head_dim fp32
  int head_dim = 128;
  int block_size = 16;  // of the KV cache: with head_dim, decides the kernel (and so the splits)
};

// (token, head) rows of a prefill work item: kAttentionTileRows when the batch fills the GPU with
// such items, else kAttentionSmallTileRows (AttentionPlan::prefill_rows).
inline constexpr int kAttentionTileRows = 128;
inline constexpr int kAttentionSmallTileRows = 64;
// Rows of one partial-result slot: a split decode item (16 rows) holds one slot per split, a split
// prefill item its rows / kAttentionSlotRows consecutive ones.
inline constexpr int kAttentionSlotRows = 16;
inline constexpr int kGeneralAttentionMaxHeadDim = 256;
inline constexpr int kDefaultMinSplitKeys = 64;
inline constexpr int kAttentionMaxSplits = 64;  // splits of one item's key range

/// Whether the mma.sync kernel takes this cache shape; else paged_attention runs the general one.
[[nodiscard]] inline bool attention_fast_kernel_supports(int head_dim, int block_size) {
  return (head_dim == 64 || head_dim == 128) && block_size > 0 && block_size % 16 == 0;
}

/// Bytes of device workspace for these limits (16-byte aligned sections; the partial sections are
/// empty when the limits' shape runs the general kernel, which never splits):
/// [counts: int32 x 4][items: AttentionWorkItem x max_items][token info: x max_tokens]
/// [split counters: int32 x max_partial_slots][partial lse: fp32 x max_partial_slots x 16][partial
/// out: fp32 x max_partial_slots x 16 x head_dim]
[[nodiscard]] size_t attention_workspace_bytes(const AttentionLimits& limits);

/// Byte offsets of the workspace sections (counts at 0).
struct AttentionWorkspaceSections {
  size_t items, token_info, counters, lse, out, total;
};
[[nodiscard]] AttentionWorkspaceSections attention_workspace_sections(
    const AttentionLimits& limits);

/// Host-side inputs of the plan.
struct AttentionPlanInput {
  const int32_t* query_start_loc = nullptr;  // host [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // host [num_seqs]
  int num_seqs = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int num_sms = 132;  // cudaDevAttrMultiProcessorCount of the device
  // Fewest keys a split may hold (rounded up to the kernel's 64-key tile): a shorter one costs more
  // in partial writes and merging than it saves.
  int min_split_keys = kDefaultMinSplitKeys;
  // PagedAttentionParams::sliding_window of the launches (0: unlimited): splits then cut only the
  // keys inside the window, not the whole sequence.
  int sliding_window = 0;
  // Rows of the prefill items: 0 lets the plan choose (choose_prefill_rows); tests force
  // kAttentionTileRows or kAttentionSmallTileRows to reach both kernels with small batches.
  int prefill_rows = 0;
  // The launches may run the Hopper prefill kernel (hopper_prefill_available for the model's
  // shape, PagedAttentionParams::hopper set): 128-row unsplit items are then kept down to half a
  // wave of them, where the FlashAttention-2 kernel needs two waves or splits.
  bool hopper_prefill = false;
};

/// The work partition of one step. Decode items (a sequence whose query rows fit in 16: decode,
/// short speculative chunks) run in a kernel that splits each key tile over its 4 warps; prefill
/// items (128 query rows, or 64 when 128-row items would not fill the GPU) run the FlashAttention-2
/// kernel. When there are too few items to fill the GPU (small batches, long contexts) each item's
/// key range is split (flash-decoding) and the last split block of each item merges the partials.
struct AttentionPlan {
  std::vector<AttentionWorkItem> items;        // decode items, then prefill items
  std::vector<AttentionTokenInfo> token_info;  // [num_tokens]
  int num_decode_items = 0;
  int num_prefill_items = 0;
  int num_partial_slots = 0;
  int decode_grid = 0;   // blocks launched; >= num_decode_items (a graph may fix it higher)
  int prefill_grid = 0;  // blocks launched; >= num_prefill_items
  int prefill_rows = kAttentionTileRows;  // rows of every prefill item of this plan
  bool prefill_split = false;  // some prefill item is split (the Hopper kernel takes none)
};

/// Fills `plan`. cudaErrorInvalidValue when the batch breaks the limits or the head counts. For a
/// shape of the general kernel (limits.head_dim, limits.block_size) the plan never splits keys.
cudaError_t plan_paged_attention(const AttentionPlanInput& input, const AttentionLimits& limits,
                                 AttentionPlan* plan);

/// Copies the plan's counts, items and token info into the workspace and zeroes its split counters
/// (stream-ordered).
cudaError_t upload_attention_plan(const AttentionPlan& plan, const AttentionLimits& limits,
                                  void* workspace, cudaStream_t stream);

/// Runs the uploaded plan: softmax(q k^T * scale) v per query token and head, fp32 online softmax,
/// written to params.out in dtype. Shapes the fast kernel does not take (see
/// attention_fast_kernel_supports; also a q that is not 16-byte aligned) run
/// paged_attention_general instead, which needs neither the plan nor the workspace.
cudaError_t paged_attention(const PagedAttentionParams& params, const AttentionPlan& plan,
                            const AttentionLimits& limits, void* workspace, cudaStream_t stream);

/// Whether paged_attention can run the Hopper prefill kernel for this shape on the current device
/// (a build with the sm_90a kernel, compute capability 9.0, head dim 64/128, a block size dividing
/// 128, a bf16/f16 cache of the query's dtype, no soft-capping). Tells the plan
/// (AttentionPlanInput::hopper_prefill); the launch checks again, with the cache pointers.
[[nodiscard]] bool hopper_prefill_available(const KVCacheLayout& layout, DType dtype,
                                            DType kv_dtype, float softcap);

/// The general kernel alone (for tests): one warp per (token, head), keys streamed from the paged
/// cache, fp32 online softmax. Any head_dim in [1, kGeneralAttentionMaxHeadDim], any block_size >=
/// 1, any num_heads / num_kv_heads group, any q_stride >= num_heads * head_dim. Its grid is
/// ceil(num_tokens * num_heads / 4) blocks and it reads only params, so a graph may capture it.
cudaError_t paged_attention_general(const PagedAttentionParams& params, cudaStream_t stream);

}  // namespace pagoda::cuda
