#include "engine/draw_inputs.h"

#include "sampling/bad_words.h"

namespace pagoda {

DrawInputs::DrawInputs(const SamplingParams& params, std::span<const int32_t> prompt,
                       std::span<const int32_t> eos_ids, int64_t vocab_size)
    : repetition_(params.repetition_penalty != 1.0f),
      counted_(params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
               params.frequency_penalty != 0.0f),
      bias_(params.logit_bias.begin(), params.logit_bias.end()) {
  if (repetition_) {
    prompt_.assign(prompt.begin(), prompt.end());
    for (int32_t t : prompt) add(t, true);
  }
  disallowed_ = params.disallowed_tokens(vocab_size);
  if (params.min_tokens > 0) {
    if (!params.ignore_eos) masked_.assign(eos_ids.begin(), eos_ids.end());
    masked_.insert(masked_.end(), params.stop_token_ids.begin(), params.stop_token_ids.end());
  }
}

void DrawInputs::add(int32_t token, bool in_prompt) {
  auto [it, inserted] = index_.try_emplace(token, static_cast<int32_t>(penalties_.size()));
  if (inserted) penalties_.push_back({token, 0, 0});
  DrawPenaltyToken& e = penalties_[static_cast<size_t>(it->second)];
  if (in_prompt) {
    e.in_prompt = 1;
  } else {
    ++e.output_count;
  }
}

DeviceDraw DrawInputs::draw(const SamplingParams& params, uint64_t seed,
                            std::span<const int32_t> output) {
  if (counted_) {
    if (output.size() < num_output_seen_) {  // never expected: rebuild from the prompt
      penalties_.clear();
      index_.clear();
      for (int32_t t : prompt_) add(t, true);
      num_output_seen_ = 0;
    }
    for (size_t i = num_output_seen_; i < output.size(); ++i) add(output[i], false);
  }
  num_output_seen_ = output.size();
  DeviceDraw d;
  d.temperature = params.greedy() ? 0.0f : params.temperature;
  d.seed = seed;
  d.counter = static_cast<uint64_t>(output.size());
  d.top_k = params.top_k;
  d.top_p = params.top_p;
  d.min_p = params.min_p;
  d.repetition_penalty = params.repetition_penalty;
  d.presence_penalty = params.presence_penalty;
  d.frequency_penalty = params.frequency_penalty;
  d.penalty_tokens = penalties_;
  d.logit_bias = bias_;
  const bool min_tokens_mask = static_cast<int>(output.size()) < params.min_tokens;
  if (params.bad_words_token_ids.empty() && disallowed_.empty()) {
    if (min_tokens_mask) d.masked = masked_;
  } else if (params.bad_words_token_ids.empty() && !min_tokens_mask) {
    d.masked = disallowed_;  // the common allowed_token_ids case: no copy per step
  } else {
    step_masked_ = disallowed_;
    if (min_tokens_mask) step_masked_.insert(step_masked_.end(), masked_.begin(), masked_.end());
    append_bad_word_bans(params.bad_words_token_ids, output, step_masked_);
    d.masked = step_masked_;
  }
  d.num_logprobs = params.logprobs.value_or(-1);
  return d;
}

}  // namespace pagoda
