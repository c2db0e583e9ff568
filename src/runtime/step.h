#pragma once
// The step contract between the engine and whatever executes its steps (runtime/executor.h): a
// StepPlan says, by value, what to compute; a StepResult says what came out. By value means the
// plan holds no pointer into engine state, so it can be serialised to a worker process
// (runtime/step_codec.h) as well as run in-process.
//
// A sequence's part of a step is a run of new tokens at positions num_computed.. (a prompt chunk,
// the token sampled last step, and possibly trailing speculative drafts), and the draws of its
// last rows.size() tokens. Example: a decode with 3 drafts d1 d2 d3 after the last sampled token
// t has tokens [t, d1, d2, d3] at positions n .. n+3 and 4 rows: row j is the distribution of the
// token after tokens[j] (verifying d(j+1), and row 3 the bonus token). A prefill chunk that does
// not reach the prompt's end has no rows; a request with prompt log-probabilities has a row per
// token, each of them returned as logits (temperature < 0).
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "model/model.h"

namespace pagoda {

/// DeviceDraw by value: the sampling of one row with its own copies of the processor lists.
struct RowDraw {
  float temperature = -1.0f;  // < 0: return the row's logits; 0: greedy; > 0: sample
  uint64_t seed = 0;
  uint64_t counter = 0;  // the request's token index of the token drawn
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int num_logprobs = -1;
  std::vector<DrawPenaltyToken> penalty_tokens;
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<int32_t> masked;
  std::vector<uint32_t> allowed;  // structured outputs: [ceil(vocab / 32)] bitmask, or empty

  /// A copy of `d` (its spans copied).
  [[nodiscard]] static RowDraw from(const DeviceDraw& d);
  /// A DeviceDraw whose spans point into this object.
  [[nodiscard]] DeviceDraw view() const;
};

/// One sequence's part of a step.
struct PlannedSequence {
  uint64_t id = 0;              // the engine's sequence id (the KV cache manager's request id)
  int32_t num_computed = 0;     // tokens already in its KV blocks: the position of tokens[0]
  std::vector<int32_t> tokens;  // [num_new]: the tokens to compute now
  int32_t num_spec = 0;         // of tokens, the trailing speculative drafts
  // Block table changes: the executor's table for `id` keeps its first block_table_start entries
  // and appends new_blocks (a new or preempted sequence sends its whole table with start 0).
  // Example: a table [7, 9] that grew a block 4 is sent as start 2, new_blocks [4].
  int32_t block_table_start = 0;
  std::vector<int32_t> new_blocks;
  std::vector<RowDraw> rows;  // draws of the last rows.size() tokens' next-token distributions
  // The sequence starts here (new, or resumed after preemption): KV before num_computed comes
  // from the prefix cache, so the executor's draft model trusts its own layers there too.
  bool fresh = false;
  // Speculation by a model in the executor (runtime/draft_proposer.h, eagle_proposer.h): the
  // trailing num_spec tokens are placeholders that the executor's draft model, parallel drafter
  // or EAGLE head replaces with its proposals before the target computes them; draft_draw says
  // how it draws them (draft j with counter + j).
  bool propose = false;
  RowDraw draft_draw;
};

/// One step.
struct StepPlan {
  std::vector<PlannedSequence> seqs;
  std::vector<std::pair<int32_t, int32_t>> block_copies;  // (src, dst): copy-on-write, done first
  std::vector<uint64_t> finished;  // sequences the executor may forget (their tables)
  // Layers whose output hidden states come back for every new token: layer l is the residual
  // stream after layer l, -1 the embeddings, the layer count the final-normed output (CPU). An
  // EAGLE head's layers are added by the runner itself (runtime/eagle_proposer.h).
  std::vector<int32_t> hidden_layers;
  // Fills the rows' structured-output masks (RowDraw::allowed) late: the in-process runner calls
  // it once the forward pass is queued on the device and before the sampler reads the rows, so
  // that the host computes the masks while the device computes the logits; an executor that
  // sends the plan to another process calls it before encoding. Called once, on the thread that
  // launches; empty: the rows are complete.
  std::function<void(StepPlan&)> fill_late;
};

/// What a step produced for one sequence: per row, the token drawn on the device (-1: sample its
/// logits on the host) and, with RowDraw::num_logprobs >= 0, its log-probabilities.
struct SequenceResult {
  std::vector<int32_t> tokens;
  std::vector<DrawnLogprobs> logprobs;
  int32_t first_row = 0;  // index of this sequence's first row in StepResult::logits
  // PlannedSequence::propose: the draft model's tokens [num_spec] (what the target verified), and
  // for a sampled draw (temperature > 0) the distributions q they were drawn from,
  // [num_spec, vocab] fp32 row-major (empty for greedy drafts: q is one-hot at the argmax).
  std::vector<int32_t> drafts;
  std::vector<float> draft_probs;
};

/// What a step produced. Spans stay valid until the executor's next launch.
struct StepResult {
  std::vector<SequenceResult> seqs;  // parallel to StepPlan::seqs
  int64_t vocab = 0;
  // [rows, vocab] fp32, every row of the step in plan order; a row drawn on the device may be
  // left unwritten (empty when every row was drawn).
  std::span<float> logits;
  // [hidden_layers.size(), num_tokens, hidden] fp32 in plan order of the tokens.
  std::span<float> hidden_states;

  [[nodiscard]] std::span<float> row(int64_t r) {
    return logits.subspan(static_cast<size_t>(r * vocab), static_cast<size_t>(vocab));
  }
};

}  // namespace pagoda
