#pragma once
// Beam search over next-token log-probabilities, with the rules of transformers' generate(
// num_beams=W, do_sample=False) (its vectorised _beam_search), independent of how the rows are
// computed: the engine runs each live beam as a sequence of its own and hands the rows here.
//
// How it works. A search holds up to W live beams (generated tokens, sum of their
// log-probabilities) and up to W finished hypotheses, best first. A step takes one log-softmax
// row per live beam and ranks every continuation (beam, token) by sum + row[token]; only the K
// best matter, K = max(2, 1 + number of stop tokens) * W, which guarantees W continuations that
// do not end even if every stop token ranks high. Walking the K in order, a continuation that
// ends (a stop token, a stop string, or max_tokens reached) becomes a finished hypothesis if it
// ranks among the first W, scored sum / generated_tokens ** length_penalty (the end token
// counted); the others fill the next live beams until there are W. The finished set keeps its W
// best. The search ends when no continuation goes on (all K ended: at max_tokens every one does),
// with early_stopping true once W hypotheses are finished, and otherwise once the best live
// beam's score at the hypothetical length (its current length; max_tokens for "never" with a
// positive length_penalty) cannot beat the worst of W finished ones; once that test fails, no
// hypothesis is added any more.
//
// Worked example (W = 2, K = 4, length_penalty 1, one stop token E): a live beam [a] (sum -1.0)
// has the row {b: -0.1, E: -0.2, c: -0.5, d: -2.0}. The ranked continuations are [a b] -1.1,
// [a E] -1.2, [a c] -1.5, [a d] -3.0. [a E] ranks second (< W): it is finished with score
// -1.2 / 2 = -0.6. The next live beams are [a b] and [a c] (the first two that do not end).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pagoda/request_output.h"
#include "sampling/sampling_params.h"

namespace pagoda {

struct BeamSearchOptions {
  int beam_width = 1;  // W (the request's n)
  float length_penalty = 1.0f;
  EarlyStopping early_stopping = EarlyStopping::kFalse;
  int max_tokens = 16;  // a beam that reaches it ends (finish reason length)
  /// Distinct token ids that end a beam (EOS unless ignore_eos, and stop_token_ids): K's size.
  int num_stop_tokens = 0;
};

/// A live beam: its generated tokens and the sum of their log-probabilities.
struct Beam {
  std::vector<int32_t> tokens;
  float sum_logprob = 0;
};

/// A continuation of live beam `beam` by `token`, with the sum of log-probabilities it would have.
struct BeamCandidate {
  int beam = 0;
  int32_t token = 0;
  float sum_logprob = 0;
};

/// How a continuation ends: finish reason stop (a stop token; stop_reason empty for EOS, else the
/// token id; or a stop string, stop_reason the string) or length.
struct BeamEnd {
  FinishReason reason = FinishReason::kStop;
  std::string stop_reason;
};

/// A finished hypothesis: its tokens (the end token included), sum and score.
struct BeamHypothesis {
  std::vector<int32_t> tokens;
  float sum_logprob = 0;
  float score = 0;  // sum_logprob / tokens.size() ** length_penalty
  BeamEnd end;
};

class BeamSearch {
 public:
  /// Starts with one live beam without tokens (the prompt alone).
  explicit BeamSearch(const BeamSearchOptions& options);

  [[nodiscard]] const std::vector<Beam>& live() const { return live_; }
  /// Tokens generated so far by every live beam.
  [[nodiscard]] int num_generated() const { return num_generated_; }
  [[nodiscard]] bool done() const { return done_; }

  /// The K best continuations, best first (ties: lower beam, then lower token). rows[i] is live
  /// beam i's log-softmax row [vocab]; -inf entries (masked tokens) are never candidates.
  [[nodiscard]] std::vector<BeamCandidate> candidates(
      std::span<const std::span<const float>> rows) const;

  /// Applies a step: ends[j] says whether candidates[j] (from candidates()) ends by a stop token
  /// or string (at max_tokens every candidate ends, with reason length if not). Returns the
  /// continuations that become the next live beams, best first (live() is then parallel to it);
  /// empty once the search is done.
  std::vector<BeamCandidate> advance(std::span<const BeamCandidate> candidates,
                                     std::span<const std::optional<BeamEnd>> ends);

  /// The finished hypotheses, best first: W of them once done().
  [[nodiscard]] const std::vector<BeamHypothesis>& finished() const { return finished_; }

 private:
  [[nodiscard]] float length_score(float sum_logprob, int length) const;

  BeamSearchOptions options_;
  std::vector<Beam> live_;
  std::vector<BeamHypothesis> finished_;  // best first, at most W
  int num_generated_ = 0;
  bool improvement_possible_ = true;  // transformers' is_early_stop_heuristic_unsatisfied
  bool done_ = false;
};

}  // namespace pagoda
