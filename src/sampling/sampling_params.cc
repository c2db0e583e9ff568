#include "sampling/sampling_params.h"

#include <cmath>

#include "core/status.h"

namespace pagoda {
namespace {

[[noreturn]] void reject(const char* param, const std::string& why) {
  throw InvalidArgument(fmt::format("{} {}", param, why));
}

}  // namespace

int StructuredOutputsParams::num_constraints() const {
  return static_cast<int>(json.has_value()) + static_cast<int>(regex.has_value()) +
         static_cast<int>(choice.has_value()) + static_cast<int>(grammar.has_value()) +
         static_cast<int>(json_object) + static_cast<int>(structural_tag.has_value());
}

std::vector<int32_t> SamplingParams::disallowed_tokens(int64_t vocab_size) const {
  std::vector<int32_t> out;
  if (!allowed_token_ids) return out;
  std::vector<bool> allowed(static_cast<size_t>(vocab_size), false);
  for (int32_t t : *allowed_token_ids) {
    if (t >= 0 && t < vocab_size) allowed[static_cast<size_t>(t)] = true;
  }
  for (int32_t t = 0; t < vocab_size; ++t) {
    if (!allowed[static_cast<size_t>(t)]) out.push_back(t);
  }
  return out;
}

void SamplingParams::validate(int64_t vocab_size) const {
  if (n < 1 || n > 128) reject("n", fmt::format("must be in [1, 128], got {}", n));
  if (!std::isfinite(temperature) || temperature < 0) {
    reject("temperature", fmt::format("must be a finite number >= 0, got {}", temperature));
  }
  if (!std::isfinite(top_p) || top_p <= 0 || top_p > 1)
    reject("top_p", fmt::format("must be in (0, 1], got {}", top_p));
  if (top_k < -1)
    reject("top_k", fmt::format("must be -1 (off), 0 (off) or positive, got {}", top_k));
  if (!std::isfinite(min_p) || min_p < 0 || min_p > 1)
    reject("min_p", fmt::format("must be in [0, 1], got {}", min_p));
  if (!std::isfinite(presence_penalty) || presence_penalty < -2 || presence_penalty > 2) {
    reject("presence_penalty", fmt::format("must be in [-2, 2], got {}", presence_penalty));
  }
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2 || frequency_penalty > 2) {
    reject("frequency_penalty", fmt::format("must be in [-2, 2], got {}", frequency_penalty));
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0 || repetition_penalty > 2) {
    reject("repetition_penalty", fmt::format("must be in (0, 2], got {}", repetition_penalty));
  }
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || token >= vocab_size) {
      reject("logit_bias",
             fmt::format("token id {} is outside the vocabulary [0, {})", token, vocab_size));
    }
    if (!std::isfinite(bias) || bias < -100 || bias > 100) {
      reject("logit_bias",
             fmt::format("bias for token {} must be in [-100, 100], got {}", token, bias));
    }
  }
  for (int32_t token : stop_token_ids) {
    if (token < 0 || token >= vocab_size) {
      reject("stop_token_ids",
             fmt::format("token id {} is outside the vocabulary [0, {})", token, vocab_size));
    }
  }
  for (const std::string& s : stop) {
    if (s.empty()) reject("stop", "must not contain empty strings");
  }
  for (const std::string& w : bad_words) {
    if (w.find_first_not_of(" \t\n\r\f\v") == std::string::npos)
      reject("bad_words", "must not contain empty or blank strings");
  }
  if (allowed_token_ids) {
    if (allowed_token_ids->empty()) reject("allowed_token_ids", "must not be empty");
    for (int32_t token : *allowed_token_ids) {
      if (token < 0 || token >= vocab_size) {
        reject("allowed_token_ids",
               fmt::format("token id {} is outside the vocabulary [0, {})", token, vocab_size));
      }
    }
  }
  for (const std::vector<int32_t>& word : bad_words_token_ids) {
    for (int32_t token : word) {
      if (token < 0 || token >= vocab_size) {
        reject("bad_words",
               fmt::format("token id {} is outside the vocabulary [0, {})", token, vocab_size));
      }
    }
  }
  if (structured_outputs) {
    const StructuredOutputsParams& so = *structured_outputs;
    if (so.num_constraints() != 1) {
      reject("structured_outputs",
             fmt::format("must set exactly one of json, regex, choice, grammar, json_object and "
                         "structural_tag, got {}",
                         so.num_constraints()));
    }
    if (so.choice && so.choice->empty()) reject("structured_outputs", "choice must not be empty");
  }
  if (max_tokens < 1) reject("max_tokens", fmt::format("must be >= 1, got {}", max_tokens));
  if (min_tokens < 0 || min_tokens > max_tokens) {
    reject("min_tokens",
           fmt::format("must be in [0, max_tokens={}], got {}", max_tokens, min_tokens));
  }
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxLogprobs)) {
    reject("logprobs", fmt::format("must be in [0, {}], got {}", kMaxLogprobs, *logprobs));
  }
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > kMaxLogprobs)) {
    reject("prompt_logprobs",
           fmt::format("must be in [0, {}], got {}", kMaxLogprobs, *prompt_logprobs));
  }
  if (!std::isfinite(length_penalty)) {
    reject("length_penalty", fmt::format("must be a finite number, got {}", length_penalty));
  }
  if (use_beam_search) validate_beam_search();
}

void SamplingParams::validate_beam_search() const {
  // Beam search ranks hypotheses by their raw log-probabilities: a field that would change the
  // distribution or the draw is refused by name rather than silently ignored.
  auto refuse = [](const char* param, const char* what) {
    reject(param, fmt::format("{} with use_beam_search", what));
  };
  if (top_p != 1.0f) refuse("top_p", "must be 1");
  if (top_k > 0) refuse("top_k", "must be 0 or -1");
  if (min_p != 0.0f) refuse("min_p", "must be 0");
  if (presence_penalty != 0.0f) refuse("presence_penalty", "must be 0");
  if (frequency_penalty != 0.0f) refuse("frequency_penalty", "must be 0");
  if (repetition_penalty != 1.0f) refuse("repetition_penalty", "must be 1");
  if (!logit_bias.empty()) refuse("logit_bias", "is not supported");
  if (!bad_words.empty() || !bad_words_token_ids.empty()) refuse("bad_words", "is not supported");
  if (allowed_token_ids) refuse("allowed_token_ids", "is not supported");
  if (structured_outputs) refuse("structured_outputs", "is not supported");
  if (logprobs) refuse("logprobs", "is not supported");
  if (prompt_logprobs) refuse("prompt_logprobs", "is not supported");
}

}  // namespace pagoda
