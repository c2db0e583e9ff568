#pragma once
// EagleProposer: EAGLE-1 / EAGLE-3 speculative decoding on the executor's side. The head
// (model/eagle_head.h) runs in the same executor with its own paged KV cache of the target's block
// ids, and proposes each speculating sequence's k drafts just before the target verifies them.
//
// How it works. The head at position p reads the token at p + 1 and the target's hidden state at
// p (EAGLE-1: the final-normed output; EAGLE-3: three layers' residual streams), and predicts the
// token at p + 2. So it lags the target by one token: the hidden states of a step's tokens come
// back after the target's forward (observe()), and the head computes those positions in the next
// step, once the token after each is known. Each step, before the target's forward pass:
//  1. Catch-up pass: one head forward over the positions [computed, n) of every sequence (n: the
//     step's num_computed, all verified), each with its token p + 1 (the last one is the step's
//     first token) and the target's hidden state at p, kept since observe(). A sequence that
//     proposes gets the row at n - 1: d1, and the head's output g at n - 1. A sequence in a
//     one-token step without drafts (adaptive length 0) lags: it is left out, its pending states
//     kept for its next proposal, so that a request that stopped speculating costs no head pass.
//     On the device the target keeps its last step only, so a sequence lags only with a single
//     pending token (not after a prompt chunk or accepted drafts), and the next observe() drops
//     it: the head trusts its KV there (stale; acceptance only), as after a step sat out.
//  2. Pass j = 2..k feeds d(j-1) at position n + j - 2 with the head's previous output g instead
//     of a target hidden state (EAGLE's feature extrapolation), giving d(j).
//  3. The drafts replace the plan's placeholders; the step result carries them (and q for
//     sampled draws, as DraftProposer::draw draws). Greedy draws are asked of the head as device
//     draws (DraftProposer::device_draw): a GPU head returns one token per row and no logits.
// Worked example, k = 3, t sampled at position 20, the head's KV valid to 18: the catch-up
// computes position 19 (token t, target hidden h19) and draws d1 (for position 21); pass 2
// computes position 20 (d1, g19) and draws d2; pass 3 computes 21 (d2, g20) and draws d3. The
// target computes 20..23 (t d1 d2 d3). If it keeps d1 only, the next step has n = 22: the head
// counts its KV valid to 19 and recomputes 20 and 21 from the target's hidden states h20, h21.
//
// On a device (the target and the head both GPU models of one device and dtype: on_device()),
// the hidden states never cross to the host: the target keeps its step's layers in its fixed
// buffer (Model::device_hidden_states), observe() records each token's row there, and the
// catch-up pass gathers those rows straight into the head's input (ForwardBatch::
// input_hidden_device); passes 2..k gather the head's own outputs g from its buffer the same way.
// The target's buffer holds its last step only: a sequence whose pending states came from an
// earlier step (it sat out a step) has lost them, and catches up as a sequence after cached
// blocks does (below): its KV there trusted, zeros for the proposing row. On the CPU the states
// come back to the host (fp32) as they always did. A head with decode graphs (a GPU head,
// without --enforce-eager) asks, when every sequence of the catch-up proposes with the same
// number of tokens (1 after a rejection, up to k + 1 after k accepted drafts), for a row per
// token, so that the pass is decode-shaped and replays a graph; only each sequence's last row
// is drawn from.
//
// Chained passes (a head whose model chains_on_device(): the GPU head with device sampling, and
// every proposing sequence's draft greedy). The passes' inputs are known before any runs except
// the drafts themselves: pass j + 1 computes, for each sequence still drafting, the draft that
// pass j drew (at the row it drew it) with the head's output of that row's token. So every pass
// is built first and the head runs them as one Model::forward_chain: on the GPU each pass reads
// the previous one's drawn ids on the device, and the host reads the k drafts once, after the
// last pass (no host round trip between passes). Sampled drafts (the CPU, host sampling) keep
// the pass-by-pass path; both give the same drafts (the same passes and inputs).
//
// KV validity. `computed` per sequence: the head's KV of positions [0, computed) holds verified
// inputs. The head's KV never enters the prefix cache as its own: a sequence that starts with
// cached blocks (PlannedSequence::fresh) has no target hidden states for them, so the head trusts
// whatever its layer holds there (the KV of an earlier sequence with the same tokens, written one
// step after the block's; stale otherwise) and catches up from num_computed. Only acceptance
// depends on it: verification keeps the target's distribution whatever the drafts are.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/model.h"
#include "runtime/step.h"

namespace pagoda {

class EagleProposer {
 public:
  /// `head` (ModelDefinition::eagle set) has a KV cache of the target's blocks; `target` is the
  /// model whose hidden states it reads (its hidden size; where they stay: on_device()).
  EagleProposer(Model& head, int block_size, const Model& target);

  /// The target's hidden layers the head reads (StepPlan::hidden_layers' convention).
  [[nodiscard]] const std::vector<int32_t>& target_layers() const { return target_layers_; }

  /// Runs the head over the plan (tables: each sequence's block table, already updated), fills
  /// the placeholders of the sequences with PlannedSequence::propose and writes their drafts (and
  /// q) into results [plan.seqs.size()].
  void propose(StepPlan& plan, const std::unordered_map<uint64_t, std::vector<int32_t>>& tables,
               std::span<SequenceResult> results);
  /// Whether the target's hidden states stay on its device (observe(plan, DeviceHidden)); else
  /// they come to the host (observe(plan, span)), and the ModelRunner asks for them there.
  [[nodiscard]] bool on_device() const { return on_device_; }
  /// The target computed `plan` (its drafts filled in): hidden [target_layers().size(), T,
  /// target_hidden] fp32, T the plan's tokens in order.
  void observe(const StepPlan& plan, std::span<const float> hidden);
  /// The same on the device: the target's view of target_layers() (DeviceHidden::from_layer),
  /// whose rows are the plan's tokens in order; valid until the target's next step.
  void observe(const StepPlan& plan, const DeviceHidden& hidden);
  /// The sequence is gone.
  void forget(uint64_t id) { seqs_.erase(id); }
  /// Copies the head's KV blocks (copy-on-write of forks), as the target's.
  void copy_blocks(std::span<const std::pair<int32_t, int32_t>> src_dst) {
    head_.copy_kv_blocks(src_dst);
  }

 private:
  struct SeqState {
    int32_t computed = 0;         // positions [0, computed) hold the head's KV of verified inputs
    std::vector<int32_t> tokens;  // [pending]: the target's tokens at computed, computed + 1, ...
    std::vector<float> hidden;    // host: [pending, width_]: the target's hidden states there
    std::vector<int32_t> rows;    // device: [pending]: their rows in target_states_ of `step`
    uint64_t step = 0;            // device: the observed step (observed_) the rows belong to
  };
  // A sequence that proposes: plan index, position n of the step's first token, k.
  struct Active {
    size_t i;
    int32_t n;
    int32_t k;
  };
  using Tables = std::unordered_map<uint64_t, std::vector<int32_t>>;
  // One token of a catch-up pass: its position's input token and hidden state (host: a row of
  // SeqState::hidden, null for zeros; device: a row of target_states_, -1 for zeros).
  struct CatchUp {
    size_t i;       // plan index
    int32_t start;  // position of ids[0]
    std::vector<int32_t> ids;
    std::vector<const float*> host;
    std::vector<int32_t> rows;
  };
  // One head forward's inputs. Example: sequences A (positions 7, 8 with tokens a8, a9) and B
  // (position 3, token b4), a row for each: ids [a8, a9, b4], positions [7, 8, 3], query_start
  // [0, 2, 3], seq_lens [9, 4], rows [1, 2], hidden [3, width] (host) or hidden_rows [3] (device)
  // in the same order.
  struct Pass {
    std::vector<int32_t> ids, positions, query_start{0}, seq_lens, flat_tables, rows;
    std::vector<std::vector<int32_t>> tables;  // [seqs]: padded to max_blocks by run()
    std::vector<int64_t> slots;
    std::vector<float> hidden;         // host: [tokens, width]
    std::vector<int32_t> hidden_rows;  // device: [tokens], rows of the pass's source (-1: zeros)
    std::vector<DeviceDraw> draws;     // [rows]: each row's draw (device_draw of its draft draw)
    std::vector<int32_t> drawn;        // [rows]: after run(), a token drawn on the device, else -1
    int max_blocks = 1;
  };
  // Adds a token whose input hidden state is `hidden` (host: width floats, empty for zeros) or
  // row `row` of the pass's source (device).
  void add_token(Pass& pass, const std::vector<int32_t>& table, int32_t position, int32_t token,
                 std::span<const float> hidden, int32_t row) const;
  static void end_sequence(Pass& pass, const std::vector<int32_t>& table, int32_t end);
  // The pass as a head forward (tables padded into pass.flat_tables) whose hidden inputs are
  // `width` wide: host rows, or on the device pass.hidden_rows of `source` (null: set later, by
  // forward_chain).
  [[nodiscard]] ForwardBatch batch_of(Pass& pass, int64_t width, const DeviceHidden* source) const;
  // Runs a pass whose hidden inputs are `width` wide (device: gathered from `source`); returns
  // the logits of its rows not drawn on the device (all rows' span; those rows only are valid,
  // or empty when every row was drawn), pass.drawn the others' tokens, and leaves the head's
  // outputs of the rows in outputs_ [rows, hidden] (host) or in its device buffer (device).
  [[nodiscard]] std::span<float> run(Pass& pass, int64_t width, const DeviceHidden* source);
  // Passes 2..k pass by pass after the catch-up `first` (last_row: each active sequence's row
  // there), each pass's drafts back on the host before the next pass is built.
  void propose_passes(StepPlan& plan, Pass& first, std::span<const Active> active,
                      std::span<const size_t> last_row, const Tables& tables,
                      std::span<SequenceResult> results);
  // The catch-up and passes 2..k built at once and run as one Model::forward_chain.
  void propose_chained(StepPlan& plan, Pass& first, std::span<const Active> active,
                       std::span<const size_t> last_row, const Tables& tables,
                       std::span<SequenceResult> results);

  Model& head_;
  int block_size_;
  int64_t hidden_;  // the head's hidden size (its outputs g)
  int64_t width_;   // per token of the target: layers x target hidden
  int64_t target_hidden_;
  std::vector<int32_t> target_layers_;
  std::vector<float> outputs_;  // host: [rows of the last pass, hidden_]
  bool on_device_ = false;
  bool uniform_catch_up_ = false;
  bool chains_ = false;    // device: the head chains greedy passes on its device (chains_on_device)
                           // // the head replays decode graphs: decode-shaped catch-ups
  uint64_t observed_ = 0;  // device: target steps observed
  DeviceHidden target_states_;  // device: the last observed step's target layers
  DeviceHidden head_states_;    // device: the head's outputs of its last pass (layer 0)
  std::unordered_map<uint64_t, SeqState> seqs_;
};

}  // namespace pagoda
