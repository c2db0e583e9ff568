#pragma once
// What one completion's next token needs when it is drawn on the model's device: the sampling
// parameters and the sparse processor lists (penalty tokens, bias, min_tokens and bad_words masks)
// of a DeviceDraw, kept up to date in O(new tokens) per step.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/model.h"
#include "sampling/sampling_params.h"

namespace pagoda {

/// One completion's DeviceDraw inputs: its history as distinct tokens with output counts.
class DrawInputs {
 public:
  DrawInputs() = default;
  /// eos_ids are masked with the stop_token_ids while fewer than min_tokens have been generated
  /// (unless ignore_eos), as the CPU sampler does.
  /// allowed_token_ids become a mask of the rest of the vocab_size tokens.
  DrawInputs(const SamplingParams& params, std::span<const int32_t> prompt,
             std::span<const int32_t> eos_ids, int64_t vocab_size = 0);

  /// The draw of the token after `output` (the completion's generated tokens so far; only the
  /// part not seen by an earlier call is read). The returned spans point into this object and
  /// stay valid until the next call.
  [[nodiscard]] DeviceDraw draw(const SamplingParams& params, uint64_t seed,
                                std::span<const int32_t> output);

  /// The penalty entries (for tests): distinct tokens of the prompt (with a repetition penalty)
  /// and of the output (with any penalty).
  [[nodiscard]] std::span<const DrawPenaltyToken> penalty_tokens() const { return penalties_; }

 private:
  void add(int32_t token, bool in_prompt);

  bool repetition_ = false;      // the prompt's tokens count
  bool counted_ = false;         // some penalty reads the output
  std::vector<int32_t> prompt_;  // kept to rebuild if the output ever shrinks
  std::vector<DrawPenaltyToken> penalties_;
  std::unordered_map<int32_t, int32_t> index_;  // token -> its entry in penalties_
  size_t num_output_seen_ = 0;
  std::vector<std::pair<int32_t, float>> bias_;
  std::vector<int32_t> masked_;       // min_tokens: eos and stop ids
  std::vector<int32_t> disallowed_;   // allowed_token_ids: every other token
  std::vector<int32_t> step_masked_;  // this draw's: masked_ (while it applies) and bad words
};

}  // namespace pagoda
