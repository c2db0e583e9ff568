// Host side of paged attention: the work partition and its upload.
//
// Why split keys: a decode batch of B sequences has only B x kv_heads items; with 8 kv heads and
// one sequence that is 8 blocks on a 132-SM GPU. When the items cannot fill the GPU twice over,
// each item's key range is cut into chunks of >= min_split_keys keys so that the blocks do, and the
// last block of each split item merges the partial softmaxes by their log-sum-exp.
#include <algorithm>
#include <cstring>

#include "kernels/cuda/paged_attention.h"

namespace pagoda::cuda {
namespace {

constexpr int kDecodeRows = 16;  // query rows of a decode item (one mma tile)
constexpr int kKeyTile = 64;     // keys per kernel iteration: splits are multiples of it
constexpr int kBlocksPerSm = 2;

size_t align16(size_t x) { return (x + 15) / 16 * 16; }

struct Tile {
  int seq, token_begin, token_end;
  bool decode;
};

/// The keys a tile's rows can see, [first, end): its last token sits at kv_len - (seq end -
/// token_end), so a causal tile early in a prompt sees fewer keys than the sequence holds, and with
/// a sliding window its first token sees none before first_pos - window + 1. An estimate from the
/// lengths (the kernel takes the real ranges from the positions); never empty.
struct KeyRange {
  int first, end;
  int count() const { return end - first; }
};
KeyRange tile_keys(const AttentionPlanInput& in, const Tile& t) {
  const int kv_len = std::max(0, in.seq_lens[t.seq]);
  const int seq_end = in.query_start_loc[t.seq + 1];
  const int end = std::clamp(kv_len - (seq_end - t.token_end), 1, std::max(kv_len, 1));
  const int first_pos = kv_len - (seq_end - t.token_begin);
  const int first =
      in.sliding_window > 0 ? std::clamp(first_pos - in.sliding_window + 1, 0, end - 1) : 0;
  return {first, end};
}

/// Decode blocks resident per SM: shared memory (Q tile + two K and V buffers of 64 keys, rows
/// padded by 8) over the 227 KB an SM gives, at most 4 (registers: 128 threads x ~128).
int decode_blocks_per_sm(int head_dim) {
  const size_t smem = (16 + 4 * kKeyTile) * static_cast<size_t>(head_dim + 8) * 2 + 128;
  return static_cast<int>(std::clamp<size_t>((227 * 1024) / smem, 1, 4));
}

/// The split count of an all-decode batch. Measured on the H200 (docs/benchmarks.md, "Decode
/// attention: the split count"), a split costs its block's partial write and the last block's
/// merge (about 2.5 us at 8 splits, 6.5 at 43), and one block per SM streams at about 70% of the
/// rate three share. So:
/// - fewer items than SMs, short chunks: split until every SM has one block (one sequence of
///   8,192 keys: 16 splits, 18.0 us; filling all three slots per SM took 43 splits and 20.3 us;
///   16 sequences of 512 keys: no split, 15.1 us against 18.0 with 3);
/// - otherwise (chunks of over kLongChunkKeys keys at one block per SM, or items enough for every
///   SM) the split count that minimises (waves of blocks) x (keys per block + kSplitCostKeys), a
///   wave being num_sms x decode_blocks_per_sm blocks: 64 sequences x 8 kv heads = 512 items on
///   396 slots run 1.29 waves, and 3 splits of their 4,096 keys run 3.9 (276 us against 316).
int64_t decode_splits(const AttentionPlanInput& in, int head_dim, int64_t base_items,
                      const std::vector<Tile>& tiles) {
  constexpr int64_t kSplitCostKeys = 64;
  constexpr int64_t kLongChunkKeys = 1024;
  int64_t keys = 0;
  for (const Tile& t : tiles) keys += tile_keys(in, t).count();
  const int64_t mean_keys = std::max<int64_t>(1, keys / static_cast<int64_t>(tiles.size()));
  const int64_t sms = std::max(1, in.num_sms);
  const int64_t slots = sms * decode_blocks_per_sm(head_dim);
  const int64_t min_keys = std::max(kKeyTile, in.min_split_keys);
  const int64_t max_splits =
      std::clamp<int64_t>((mean_keys + min_keys - 1) / min_keys, 1, kAttentionMaxSplits);
  if (base_items < sms) {
    const int64_t one_per_sm = std::clamp<int64_t>(sms / base_items, 1, max_splits);
    if ((mean_keys + one_per_sm - 1) / one_per_sm <= kLongChunkKeys) return one_per_sm;
  }
  auto cost = [&](int64_t n) {
    const int64_t waves = (base_items * n + slots - 1) / slots;
    const int64_t chunk = ((mean_keys + n - 1) / n + kKeyTile - 1) / kKeyTile * kKeyTile;
    return static_cast<double>(waves) * static_cast<double>(chunk + (n > 1 ? kSplitCostKeys : 0));
  };
  int64_t best = 1;
  double best_cost = 0;
  for (int64_t n = 2; n <= max_splits; ++n) {
    if (best == 1 || cost(n) < best_cost) {
      best = n;
      best_cost = cost(n);
    }
  }
  // A split also costs the partial writes and the last block's merge: only worth it when the
  // model says it saves more than 15%.
  return best > 1 && best_cost < 0.85 * cost(1) ? best : 1;
}

/// Partial-result slots one split of a tile's items takes (its rows / kAttentionSlotRows).
int item_slots(const Tile& tile, int prefill_rows) {
  static_assert(kDecodeRows == kAttentionSlotRows && kAttentionTileRows % kAttentionSlotRows == 0 &&
                kAttentionSmallTileRows % kAttentionSlotRows == 0);
  return tile.decode ? 1 : prefill_rows / kAttentionSlotRows;
}

/// Rows of the plan's prefill items: 128 (each K/V fragment feeds two mma tiles per warp) when the
/// batch makes enough such items to give every SM kBlocksPerSm of them, else 64, which doubles the
/// blocks of a small batch (one 512-token prompt: 128 items of 128 rows on 132 SMs). With the
/// Hopper kernel (in.hopper_prefill: one persistent block per SM, about twice the FlashAttention-2
/// kernel's rate) 128 rows down to half a wave of items (66 on 132 SMs): one 512-token prompt of
/// 8 kv heads and GQA 4 is then 16 x 8 = 128 Hopper items instead of 256 split-free 64-row ones.
int choose_prefill_rows(const AttentionPlanInput& in, int group) {
  if (group > kAttentionSmallTileRows) return kAttentionTileRows;
  if (in.prefill_rows == kAttentionTileRows || in.prefill_rows == kAttentionSmallTileRows)
    return in.prefill_rows;
  const int tokens = kAttentionTileRows / group;
  int64_t items = 0;
  for (int s = 0; s < in.num_seqs; ++s) {
    const int n = in.query_start_loc[s + 1] - in.query_start_loc[s];
    if (n * group > kDecodeRows) items += (n + tokens - 1) / tokens;
  }
  items *= in.num_kv_heads;
  const int64_t sms = std::max(1, in.num_sms);
  if (in.hopper_prefill && 2 * items >= sms) return kAttentionTileRows;
  return items >= sms * kBlocksPerSm ? kAttentionTileRows : kAttentionSmallTileRows;
}

// Partial-result slots the workspace really holds: none for a shape of the general kernel.
int64_t partial_slots(const AttentionLimits& l) {
  return attention_fast_kernel_supports(l.head_dim, l.block_size) ? std::max(0, l.max_partial_slots)
                                                                  : 0;
}

}  // namespace

AttentionWorkspaceSections attention_workspace_sections(const AttentionLimits& l) {
  const auto slots = static_cast<size_t>(partial_slots(l));
  AttentionWorkspaceSections s{};
  s.items = 16;
  s.token_info = s.items + align16(sizeof(AttentionWorkItem) * static_cast<size_t>(l.max_items));
  s.counters =
      s.token_info + align16(sizeof(AttentionTokenInfo) * static_cast<size_t>(l.max_tokens));
  s.lse = s.counters + align16(sizeof(int32_t) * slots);
  s.out = s.lse + align16(sizeof(float) * kAttentionSlotRows * slots);
  s.total = s.out + sizeof(float) * kAttentionSlotRows * static_cast<size_t>(l.head_dim) * slots;
  return s;
}

size_t attention_workspace_bytes(const AttentionLimits& limits) {
  return attention_workspace_sections(limits).total;
}

cudaError_t plan_paged_attention(const AttentionPlanInput& in, const AttentionLimits& limits,
                                 AttentionPlan* plan) {
  *plan = AttentionPlan{};
  if (in.num_kv_heads <= 0 || in.num_heads % in.num_kv_heads != 0) return cudaErrorInvalidValue;
  const int group = in.num_heads / in.num_kv_heads;
  const int min_keys = std::max(kKeyTile, in.min_split_keys);
  if (group > kAttentionTileRows) return cudaErrorInvalidValue;
  const int64_t num_tokens = in.num_seqs > 0 ? in.query_start_loc[in.num_seqs] : 0;
  if (num_tokens > limits.max_tokens) return cudaErrorInvalidValue;
  plan->token_info.assign(static_cast<size_t>(num_tokens), AttentionTokenInfo{-1, 1, 0, 0});

  // Query tiles: a sequence whose rows fit one decode tile is one decode tile, else prefill tiles
  // of prefill_rows / group tokens.
  std::vector<Tile> tiles;
  plan->prefill_rows = choose_prefill_rows(in, group);
  const int prefill_tokens = plan->prefill_rows / group;
  for (int s = 0; s < in.num_seqs; ++s) {
    const int b = in.query_start_loc[s], e = in.query_start_loc[s + 1];
    if (e <= b) continue;
    if ((e - b) * group <= kDecodeRows) {
      tiles.push_back({s, b, e, true});
    } else {
      for (int t = b; t < e; t += prefill_tokens)
        tiles.push_back({s, t, std::min(e, t + prefill_tokens), false});
    }
  }
  const int64_t base_items = static_cast<int64_t>(tiles.size()) * in.num_kv_heads;
  const int64_t target = static_cast<int64_t>(std::max(1, in.num_sms)) * kBlocksPerSm;
  int64_t want_splits =
      base_items > 0 && base_items < target ? (target + base_items - 1) / base_items : 1;
  // The Hopper kernel takes no split items: its 128-row prefill items keep their whole key range
  // (choose_prefill_rows chose them only when they make half a wave or more).
  const bool whole_prefill =
      in.hopper_prefill && in.prefill_rows == 0 && plan->prefill_rows == kAttentionTileRows;
  const bool all_decode = !tiles.empty() && std::all_of(tiles.begin(), tiles.end(),
                                                        [](const Tile& t) { return t.decode; });
  if (all_decode) want_splits = decode_splits(in, limits.head_dim, base_items, tiles);

  // Splits per tile, cutting the keys its rows see (tile_keys: no split without keys), then a
  // fallback to no splits if they would not fit the workspace. The first split still starts at 0
  // and the last runs to kv_len, so that the positions stay the only truth.
  std::vector<int> splits(tiles.size(), 1), chunk(tiles.size(), 0);
  int64_t slots = 0;
  for (size_t i = 0; i < tiles.size(); ++i) {
    const int keys = tile_keys(in, tiles[i]).count();
    int n = static_cast<int>(
        std::min<int64_t>({want_splits, (keys + min_keys - 1) / min_keys, kAttentionMaxSplits}));
    if (whole_prefill && !tiles[i].decode) n = 1;
    n = std::max(n, 1);
    int c = (keys + n - 1) / n;
    c = (c + kKeyTile - 1) / kKeyTile * kKeyTile;
    n = (keys + c - 1) / c;
    splits[i] = std::max(n, 1);
    chunk[i] = c;
    if (splits[i] > 1)
      slots += static_cast<int64_t>(splits[i]) * in.num_kv_heads *
               item_slots(tiles[i], plan->prefill_rows);
  }
  if (slots > partial_slots(limits)) {
    std::fill(splits.begin(), splits.end(), 1);
    slots = 0;
  }

  std::vector<AttentionWorkItem> decode, prefill;
  std::vector<int64_t> prefill_cost;
  int next_slot = 0;
  for (size_t i = 0; i < tiles.size(); ++i) {
    const Tile& tile = tiles[i];
    const int kv_len = std::max(0, in.seq_lens[tile.seq]);
    const int n = splits[i];
    const int first_slot = n > 1 ? next_slot : -1;
    const int per_item = item_slots(tile, plan->prefill_rows);
    if (n > 1) next_slot += n * in.num_kv_heads * per_item;
    for (int t = tile.token_begin; t < tile.token_end; ++t)
      plan->token_info[static_cast<size_t>(t)] = {first_slot, n, tile.token_begin, 0};
    const KeyRange keys = tile_keys(in, tile);
    for (int h = 0; h < in.num_kv_heads; ++h) {
      for (int sp = 0; sp < n; ++sp) {
        AttentionWorkItem item{};
        item.seq = tile.seq;
        item.kv_head = h;
        item.token_begin = tile.token_begin;
        item.token_end = tile.token_end;
        item.kv_begin = sp > 0 ? keys.first + sp * chunk[i] : 0;
        item.kv_end = sp + 1 < n ? keys.first + (sp + 1) * chunk[i] : kv_len;
        item.partial_slot = n > 1 ? first_slot + (h * n + sp) * per_item : -1;
        plan->prefill_split |= n > 1 && !tile.decode;
        if (tile.decode) {
          decode.push_back(item);
        } else {
          prefill.push_back(item);
          // For longest-first ordering.
          prefill_cost.push_back(std::min(keys.end, item.kv_end) -
                                 std::max(keys.first, item.kv_begin));
        }
      }
    }
  }
  // Longest prefill items first, so that causal tiles of different lengths balance across SMs.
  std::vector<size_t> order(prefill.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return prefill_cost[a] > prefill_cost[b]; });

  if (static_cast<int64_t>(decode.size() + prefill.size()) > limits.max_items)
    return cudaErrorInvalidValue;
  plan->items = std::move(decode);
  plan->num_decode_items = static_cast<int>(plan->items.size());
  for (size_t i : order) plan->items.push_back(prefill[i]);
  plan->num_prefill_items = static_cast<int>(prefill.size());
  plan->num_partial_slots = static_cast<int>(slots);
  plan->decode_grid = plan->num_decode_items;
  plan->prefill_grid = plan->num_prefill_items;
  return cudaSuccess;
}

cudaError_t upload_attention_plan(const AttentionPlan& plan, const AttentionLimits& limits,
                                  void* workspace, cudaStream_t stream) {
  const AttentionWorkspaceSections s = attention_workspace_sections(limits);
  auto* base = static_cast<char*>(workspace);
  static_assert(sizeof(AttentionWorkItem) == 32);
  int32_t counts[4] = {plan.num_decode_items, plan.num_prefill_items, plan.num_partial_slots, 0};
  if (cudaError_t e = cudaMemcpyAsync(base, counts, sizeof(counts), cudaMemcpyHostToDevice, stream);
      e != cudaSuccess)
    return e;
  if (!plan.items.empty()) {
    if (cudaError_t e = cudaMemcpyAsync(base + s.items, plan.items.data(),
                                        plan.items.size() * sizeof(AttentionWorkItem),
                                        cudaMemcpyHostToDevice, stream);
        e != cudaSuccess)
      return e;
  }
  // The split counters return to zero at the end of every launch; zeroed here because a fresh
  // workspace is not.
  if (plan.num_partial_slots > 0) {
    if (cudaError_t e =
            cudaMemsetAsync(base + s.counters, 0,
                            sizeof(int32_t) * static_cast<size_t>(plan.num_partial_slots), stream);
        e != cudaSuccess)
      return e;
  }
  if (!plan.token_info.empty()) {
    if (cudaError_t e = cudaMemcpyAsync(base + s.token_info, plan.token_info.data(),
                                        plan.token_info.size() * sizeof(AttentionTokenInfo),
                                        cudaMemcpyHostToDevice, stream);
        e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

}  // namespace pagoda::cuda
