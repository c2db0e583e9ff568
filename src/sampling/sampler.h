#pragma once
// Choosing the next token from one row of logits: logits processors (bias, penalties, min_tokens),
// then greedy or temperature/top-k/top-p/min-p sampling, plus log-probabilities of the raw model
// distribution (as vLLM reports them by default).
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "sampling/sampling_params.h"

namespace pagoda {

/// A token with its log-probability.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

/// The chosen token, its log-probability and the top-k alternatives (when requested).
struct SampledToken {
  int32_t token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;  // descending
};

/// log_softmax of one row, in fp32 with a max-shifted, double-accumulated normaliser.
void log_softmax(std::span<const float> logits, std::span<float> out);

/// The k largest entries of values, descending (ties: lower index first).
[[nodiscard]] std::vector<TokenLogprob> top_k_entries(std::span<const float> values, int k);

/// The candidates of a non-greedy draw from processed logits: top-k, then min-p, then top-p, in
/// the sampler's order (logit descending, ties to the lower id). Returns their count; order[0,
/// count) are the tokens and probs[0, count) their unnormalised probabilities at the temperature
/// (the GPU sampler's reference).
[[nodiscard]] int32_t truncate_candidates(std::span<const float> logits,
                                          const SamplingParams& params, std::vector<int32_t>& order,
                                          std::vector<float>& probs);

/// Sets the logits of tokens whose bit is clear in allowed [ceil(logits.size() / 32)] to -inf.
void apply_token_bitmask(std::span<float> logits, std::span<const uint32_t> allowed);

/// One request's sampler. Its random stream belongs to the request alone, so a seeded request
/// draws the same numbers whatever else runs in the batch.
class RequestSampler {
 public:
  /// eos_ids are masked while fewer than min_tokens have been generated (unless ignore_eos).
  RequestSampler(const SamplingParams& params, std::vector<int32_t> eos_ids,
                 uint64_t fallback_seed);

  /// Samples from logits (modified in place by the processors). prompt and output are the token
  /// history that penalties look at. allowed, when not empty, is a structured-output bitmask
  /// [ceil(vocab / 32)] (bit id % 32 of word id / 32): the logits of other tokens become -inf.
  [[nodiscard]] SampledToken sample(std::span<float> logits, std::span<const int32_t> prompt,
                                    std::span<const int32_t> output,
                                    std::span<const uint32_t> allowed = {});

  /// Verifies draft x, drawn by a draft model from q ([vocab] probabilities, q(x) > 0), against
  /// this row (sampling/rejection_sampler.h): p is the row's distribution after the processors,
  /// temperature and truncations, exactly what sample() draws from; x is kept with probability
  /// min(1, p(x) / q(x)), else the token comes from max(p - q, 0) normalised. Greedy: the argmax,
  /// kept iff it is x. Two numbers of the request's stream per sampled verification. Returns the
  /// token (with sample()'s log-probabilities) and sets accepted.
  [[nodiscard]] SampledToken verify(std::span<float> logits, std::span<const int32_t> prompt,
                                    std::span<const int32_t> output,
                                    std::span<const uint32_t> allowed, std::span<const float> q,
                                    int32_t x, bool& accepted);

 private:
  void apply_processors(std::span<float> logits, std::span<const int32_t> prompt,
                        std::span<const int32_t> output, std::span<const uint32_t> allowed);
  [[nodiscard]] int32_t draw(std::span<const float> logits);
  // With logprobs asked for: the raw model distribution's log-probabilities (before any
  // processor), and its top entries into result.top_logprobs; else empty.
  [[nodiscard]] std::vector<float> raw_logprobs(std::span<const float> logits,
                                                SampledToken& result) const;

  SamplingParams params_;
  std::vector<int32_t> eos_ids_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  std::vector<int32_t> order_;
  std::vector<int32_t> disallowed_;  // allowed_token_ids' complement, for rows of disallowed_vocab_
  int32_t disallowed_vocab_ = -1;
};

}  // namespace pagoda
