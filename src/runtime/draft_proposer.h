#pragma once
// DraftProposer: draft-model speculative decoding on the executor's side. A smaller model of the
// target's vocabulary runs in the same executor, with its own paged KV cache of the same block
// ids (one block table per sequence serves both models), and proposes each speculating
// sequence's k drafts just before the target verifies them in the same step.
//
// How it works. Each step, before the target's forward pass:
//  1. Catch-up pass: one draft forward over the sequences of the plan with the tokens the target
//     computes this step that are not drafts (prompt chunks, the last sampled token t), preceded
//     by the verified tokens the draft itself has not computed yet (the last draft, when all k
//     were accepted; the tokens of the steps it lagged). So the draft sees every token the
//     target sees, at the same positions. A sequence that proposes gets its last row: q1, the
//     draft's distribution after t. A sequence in a one-token decode step without drafts (the
//     adaptive length chose 0) lags: no draft pass for it, its token kept in its history until
//     it proposes again, so a request that stopped speculating costs no draft passes.
//  2. Draft j = 1..k is drawn from q_j; passes 2..k feed d_(j-1) at position n + j - 1 (t at n)
//     for the sequences that still need drafts, each giving q_j.
//  3. The drafts replace the plan's placeholders; the step result carries them (and q for
//     sampled draws).
// Worked example, k = 3, t at position 20 with the draft's KV valid to 19: pass 1 computes t (20)
// and draws d1; pass 2 computes d1 (21), draws d2; pass 3 computes d2 (22), draws d3. The draft
// has written 20..22. If the target accepts d1 only, the next step's t' sits at 22 and the draft
// counts 22 as invalid (computed = min(23, 22)) and recomputes it from t'. If it accepts all
// three, t' is at 24 and the draft's next catch-up pass computes d3 (23) and t' (24).
//
// A parallel drafter (mask_token set; DFlash / PARD-style) proposes all k drafts in that one
// pass: after t it reads k - 1 mask tokens at positions n + 1 .. n + k - 1, and the rows of t and
// of each mask are q1 .. qk. Its checkpoint is a small Llama of the target's vocabulary trained to
// predict the token at mask position j; config.json's mask_token_id names the mask token. Worked
// example, k = 3, t at 20: one pass computes t (20), M (21), M (22) and draws d1, d2, d3 from rows
// 20, 21, 22. The drafts are never computed as inputs; the next catch-up computes the accepted ones
// (mask KV past the verified tokens is overwritten then).
//
// KV validity. The draft's own record per sequence, `computed`, is the positions whose draft KV
// holds the sequence's verified tokens; a plan with fewer computed tokens (rejected drafts,
// preemption) lowers it, a fresh sequence (new or resumed, PlannedSequence::fresh) starts at
// num_computed because its cached prefix blocks hold the draft's KV too. The prefix cache hashes
// a block in the step that first computes its last known token; the catch-up pass writes the
// draft's KV of every known token in that same step (before any attention reads it, as the
// target does), so a hashed block never holds a draft's KV of an unverified token. Drafts'
// own KV (positions after t) lies past the known tokens, in blocks not yet hashed. Prompt
// chunks never lag; a block of generated tokens hashed while its sequence lagged holds no draft
// KV for them, so a later prefix hit on it drafts from stale draft KV there: fewer drafts
// accepted, never other output (the target verifies every draft).
//
// q. A greedy draw (temperature 0) takes the argmax of the draft's logits after logit_bias and the
// masked tokens (q is one-hot). A sampled one draws from softmax(logits / T) after logit_bias and
// the masked tokens, truncated by top-k, min-p and top-p as the host sampler truncates
// (sampling/sampler.h truncate_candidates), renormalised: that is q. Penalties and
// structured-output masks are not applied to q (the engine verifies with the target's full
// distribution p and accept min(1, p/q), so any q gives exactly the target's distribution; q only
// sets acceptance). Its random numbers hash (seed, counter + j) with a salt of their own,
// independent of the target's draws.
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/model.h"
#include "runtime/step.h"

namespace pagoda {

class DraftProposer {
 public:
  /// `draft`'s KV cache must have the target's blocks (init_kv_cache with the same counts).
  /// mask_token: a parallel drafter's mask token id (one pass proposes all k drafts).
  DraftProposer(Model& draft, int block_size, std::optional<int32_t> mask_token = std::nullopt)
      : draft_(draft), block_size_(block_size), mask_token_(mask_token) {}

  /// Runs the draft over the plan (tables: each sequence's block table, already updated for this
  /// step), fills the placeholders of the sequences with PlannedSequence::propose and writes their
  /// drafts (and q) into results [plan.seqs.size()].
  void propose(StepPlan& plan, const std::unordered_map<uint64_t, std::vector<int32_t>>& tables,
               std::span<SequenceResult> results);
  /// The sequence is gone.
  void forget(uint64_t id) { seqs_.erase(id); }
  /// Copies the draft's KV blocks (copy-on-write of forks), as the target's.
  void copy_blocks(std::span<const std::pair<int32_t, int32_t>> src_dst) {
    draft_.copy_kv_blocks(src_dst);
  }

  /// The draw of one draft from draft logits (modified in place): greedy or sampled as above; q
  /// [vocab] receives the distribution when sampled (left untouched when greedy).
  [[nodiscard]] static int32_t draw(std::span<float> logits, const RowDraw& d, uint64_t counter,
                                    std::span<float> q);
  /// Draft d (0-based) of a sequence: `drawn` when the model drew it on its device (>= 0), else
  /// drawn from its row of draft logits [vocab] with the sequence's draft draw (counter + d);
  /// kept in r.drafts[d] and in the plan's speculative token slot d of s.tokens (the last
  /// s.num_spec tokens); q is the d-th [vocab] of r.draft_probs when the draw is sampled.
  static void place_draft(std::span<float> row_logits, int32_t drawn, size_t d, PlannedSequence& s,
                          SequenceResult& r);
  /// How a row of draft logits is drawn where the model runs: a greedy draft draw as a device
  /// draw (argmax after logit_bias and the masked tokens; no penalties, as draw()); a sampled one
  /// returns its logits (q is computed on the host). Views `d`'s lists.
  [[nodiscard]] static DeviceDraw device_draw(const RowDraw& d);
  /// Room for k drafts of s in r (and their [k, vocab] distributions when s's draft draw samples).
  static void size_results(const PlannedSequence& s, int32_t k, size_t vocab, SequenceResult& r);

 private:
  // Example: computed 20, history_start 12, history [h12 .. h23] (12 tokens): positions 20..23
  // are verified tokens the draft has not computed (it lagged, or they were accepted drafts).
  struct SeqState {
    int32_t computed = 0;          // positions [0, computed) hold the draft's KV of verified tokens
    int32_t history_start = 0;     // position of history[0] (a fresh sequence's num_computed)
    std::vector<int32_t> history;  // tokens at history_start.. (verified, then the last step's)
  };
  // One forward's inputs, rebuilt per pass.
  // Example: sequences A (tokens [a7, a8] at 7, 8) and B ([b3] at 3), rows for both: ids
  // [a7, a8, b3], positions [7, 8, 3], query_start [0, 2, 3], seq_lens [9, 4], logits rows [1, 2].
  struct Pass {
    std::vector<int32_t> ids, positions, query_start{0}, seq_lens, tables, rows;
    std::vector<int64_t> slots;
    std::vector<DeviceDraw> draws;  // [rows]: each row's draw (device_draw of its draft draw)
    std::vector<int32_t> drawn;     // [rows]: after run(), a token drawn on the device, else -1
    int max_blocks = 1;
  };
  // Adds a sequence's tokens with a logits row for each of the last `rows` of them, drawn with
  // `draw`.
  void add(Pass& pass, const std::vector<int32_t>& table, int32_t first_position,
           std::span<const int32_t> tokens, int rows, const RowDraw& draw) const;
  // Runs the pass: the logits of the rows not drawn on the device (all rows' span; those rows
  // only are valid, or empty when every row was drawn), pass.drawn the others' tokens.
  [[nodiscard]] std::span<float> run(Pass& pass);
  // Row `row` of a pass's logits (empty when the pass returned none).
  [[nodiscard]] static std::span<float> row_of(std::span<float> logits, size_t row, size_t vocab) {
    return logits.empty() ? logits : logits.subspan(row * vocab, vocab);
  }

  Model& draft_;
  int block_size_;
  std::optional<int32_t> mask_token_;
  std::unordered_map<uint64_t, SeqState> seqs_;
};

}  // namespace pagoda
