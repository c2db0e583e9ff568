#pragma once
// Decode context parallelism (-dcp D, --decode-context-parallel-size): the KV cache of a sequence
// spread over D tensor-parallel ranks by position, attention partials merged by log-sum-exp.
//
// How it works. The N ranks of -tp N form N / D groups of D consecutive ranks: ranks [g D,
// (g + 1) D), member m = rank % D. With -tp alone a rank's cache holds all positions of its KV
// heads, and when there are fewer KV heads than ranks the D members of a group hold the same
// head, D copies. With -dcp D a group stores each position once: the engine's allocator thinks
// in blocks of B = block_size * D tokens, and block b of a sequence is physical block b on every
// member, holding block_size of its tokens: token t on member t % D, at the member's local index
// t / D (so in its physical block (t / D) / block_size, slot (t / D) % block_size). Example
// (block_size 4, D 2, so B 8): the engine's slot of position 13 in a sequence whose block 1 is
// block 7 is 7 * 8 + 5 = 61; member 13 % 2 = 1 holds it, at local index 6, physical slot
// 7 * 4 + 6 % 4 = 30; member 0 skips it (slot -1). Each rank thus holds D times the tokens in
// the same bytes (when the members share their KV heads; otherwise a member stores the group's
// KV heads, D times its own, for 1/D of the positions: the same bytes per token as -tp alone).
//
// Each layer's attention on a rank, after its qkv projection, q/k norms and RoPE as with -tp:
//  1. gather: the group's query heads (D times the rank's, member order) and KV heads (the union
//     of the members', each taken from the first member holding it) for the step's new tokens;
//  2. write the new tokens' K and V of the group's KV heads into the cache, each on the member
//     its position picks (local_slot below);
//  3. paged attention of the group's query heads over the rank's positions only, which also
//     gives each row's log-sum-exp lse = max + log(sum exp(s - max)) of its scores;
//  4. merge: the partials (out_k, lse_k) of the D members, for the rank's own query heads:
//     out = sum_k exp(lse_k - M) out_k / sum_k exp(lse_k - M), M = max_k lse_k. This is exactly
//     softmax attention over the union of the members' positions (each out_k is normalized by
//     its own sum, exp(lse_k - M) restores that sum on a common scale); only the fp32 rounding
//     differs from one pass. A member with none of a row's positions has lse -inf, weight 0.
// The CPU communicator has no subgroups, so both gathers run over all N ranks and each rank reads
// its group's D chunks.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/communicator.h"
#include "core/tensor.h"
#include "kernels/cpu/paged_attention.h"
#include "ops/op_context.h"

namespace pagoda {

/// One rank's group of -dcp D within -tp N.
struct ContextParallelPlan {
  int size = 1;            // D
  int member = 0;          // rank % D
  int first_rank = 0;      // rank - member
  int heads = 0;           // query heads of one rank (H / N)
  int kv_heads = 0;        // KV heads of one rank (K / N, or 1 when replicated)
  int group_heads = 0;     // D * heads: the group's query heads, member m's at [m heads, ...)
  int group_kv_heads = 0;  // the union of the members' KV heads
  // [group_kv_heads]: (member, its local KV head) each group KV head is taken from.
  std::vector<std::pair<int, int>> kv_source;
};

/// Rank `rank`'s plan for a model of `num_heads` query and `num_kv_heads` KV heads over -tp
/// `world` with -dcp `dcp`. InvalidArgument naming --decode-context-parallel-size when dcp does
/// not divide world, or when a group's query heads do not read whole KV heads of the group's
/// union in order (e.g. -tp 12 -dcp 3 with 3 KV heads: ranks 3, 4, 5 hold KV heads 0, 1, 1).
[[nodiscard]] ContextParallelPlan plan_context_parallel(int num_heads, int num_kv_heads, int rank,
                                                        int world, int dcp);

/// Every rank's plan_context_parallel (the refusal is the group's, whichever rank loads).
void check_context_parallel(int num_heads, int num_kv_heads, int world, int dcp);

/// The rank's physical slot of the engine's `slot` (blocks of engine_block_size = block_size *
/// D tokens), -1 when another member holds it (see the example above).
[[nodiscard]] int64_t local_slot(int64_t slot, int engine_block_size, const ContextParallelPlan& p);

/// Step 4: out [T, n, head_dim] = the log-sum-exp merge, for group heads [h0, h0 + n), of
/// partials outs[k] [T, group_heads, head_dim] with lses[k] [T, group_heads], k < outs.size().
/// Example (one row, two members): out_0 = 1, lse_0 = 0 and out_1 = 3, lse_1 = log 3 give
/// (1 * 1 + 3 * 3) / (1 + 3) = 2.5.
void merge_attention_partials(std::span<const float* const> outs,
                              std::span<const float* const> lses, int64_t T, int group_heads,
                              int head_dim, int h0, int n, float* out);

/// Steps 1 to 4 for one rank, with its scratch buffers (grown to the largest step).
class ContextParallelAttention {
 public:
  ContextParallelAttention(ContextParallelPlan plan, Communicator* comm, int head_dim);

  [[nodiscard]] const ContextParallelPlan& plan() const { return plan_; }

  /// Step 1: q [T, heads, head_dim], k and v [T, kv_heads, head_dim] of this rank (after RoPE)
  /// -> group_q() [T, group_heads, head_dim], group_k() and group_v() [T, group_kv_heads,
  /// head_dim]. Collective.
  void gather(const float* q, const float* k, const float* v, int64_t T);
  [[nodiscard]] Tensor group_q() const;
  [[nodiscard]] Tensor group_k() const;
  [[nodiscard]] Tensor group_v() const;

  /// Step 2's slots [T]: local_slot of each of the engine's.
  [[nodiscard]] Tensor local_slots(std::span<const int64_t> slots, int engine_block_size);

  /// Steps 3 and 4: `p` with everything but q, out, num_heads, cp_* and lse set (its layout
  /// holding group_kv_heads), over the tokens of the last gather -> out [T, heads, head_dim].
  /// Collective.
  void attend(const OpContext& ctx, cpu::PagedAttentionParams p, float* out);

 private:
  ContextParallelPlan plan_;
  Communicator* comm_;
  int head_dim_;
  int64_t tokens_ = 0;
  std::vector<float> send_;     // a rank's chunk of a gather
  std::vector<float> recv_;     // [D, chunk]: the group members' chunks
  std::vector<float> q_;        // [T, group_heads, head_dim]
  std::vector<float> k_, v_;    // [T, group_kv_heads, head_dim]
  std::vector<int64_t> slots_;  // [T]
};

}  // namespace pagoda
