#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "core/status.h"
#include "sampling/bad_words.h"
#include "sampling/rejection_sampler.h"

namespace pagoda {

void log_softmax(std::span<const float> logits, std::span<float> out) {
  PAGODA_CHECK(logits.size() == out.size());
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x - max));
  const float log_z = max + static_cast<float>(std::log(sum));
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_z;
}

std::vector<TokenLogprob> top_k_entries(std::span<const float> values, int k) {
  k = std::min<int>(k, static_cast<int>(values.size()));
  std::vector<int32_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  std::vector<TokenLogprob> out;
  out.reserve(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i)
    out.push_back({idx[static_cast<size_t>(i)], values[idx[static_cast<size_t>(i)]]});
  return out;
}

void apply_token_bitmask(std::span<float> logits, std::span<const uint32_t> allowed) {
  PAGODA_CHECK(allowed.size() == (logits.size() + 31) / 32, "a bitmask of {} words for {} logits",
               allowed.size(), logits.size());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (size_t w = 0; w < allowed.size(); ++w) {
    const uint32_t bits = allowed[w];
    if (bits == ~0u) continue;
    const size_t end = std::min(logits.size(), (w + 1) * 32);
    for (size_t i = w * 32; i < end; ++i) {
      if (!((bits >> (i & 31)) & 1u)) logits[i] = kNegInf;
    }
  }
}

RequestSampler::RequestSampler(const SamplingParams& params, std::vector<int32_t> eos_ids,
                               uint64_t fallback_seed)
    : params_(params), eos_ids_(std::move(eos_ids)), rng_(params.seed.value_or(fallback_seed)) {}

void RequestSampler::apply_processors(std::span<float> logits, std::span<const int32_t> prompt,
                                      std::span<const int32_t> output,
                                      std::span<const uint32_t> allowed) {
  const auto vocab = static_cast<int32_t>(logits.size());
  auto in_vocab = [&](int32_t t) { return t >= 0 && t < vocab; };
  if (params_.repetition_penalty != 1.0f) {
    // As transformers and vLLM: every token seen in prompt or output has its logit divided by the
    // penalty when positive and multiplied when negative, once however often it occurred.
    std::vector<bool> seen(static_cast<size_t>(vocab), false);
    for (auto list : {prompt, output}) {
      for (int32_t t : list) {
        if (in_vocab(t)) seen[static_cast<size_t>(t)] = true;
      }
    }
    for (int32_t t = 0; t < vocab; ++t) {
      if (!seen[static_cast<size_t>(t)]) continue;
      float& x = logits[static_cast<size_t>(t)];
      x = x > 0 ? x / params_.repetition_penalty : x * params_.repetition_penalty;
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    // OpenAI's definition, over generated tokens only: logit -= count * frequency + (count > 0) *
    // presence.
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : output) {
      if (in_vocab(t)) ++counts[t];
    }
    for (const auto& [t, count] : counts) {
      logits[static_cast<size_t>(t)] -=
          static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
    }
  }
  for (const auto& [t, bias] : params_.logit_bias) {
    if (in_vocab(t)) logits[static_cast<size_t>(t)] += bias;
  }
  if (params_.allowed_token_ids) {
    if (disallowed_vocab_ != vocab) {  // built once: every row of a request has the same size
      disallowed_ = params_.disallowed_tokens(vocab);
      disallowed_vocab_ = vocab;
    }
    for (int32_t t : disallowed_)
      logits[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
  }
  if (!params_.bad_words_token_ids.empty()) {
    std::vector<int32_t> banned;
    append_bad_word_bans(params_.bad_words_token_ids, output, banned);
    for (int32_t t : banned) {
      if (in_vocab(t)) logits[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
    }
  }
  if (static_cast<int>(output.size()) < params_.min_tokens) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    if (!params_.ignore_eos) {
      for (int32_t t : eos_ids_) {
        if (in_vocab(t)) logits[static_cast<size_t>(t)] = kNegInf;
      }
    }
    for (int32_t t : params_.stop_token_ids) {
      if (in_vocab(t)) logits[static_cast<size_t>(t)] = kNegInf;
    }
  }
  if (!allowed.empty()) apply_token_bitmask(logits, allowed);
}

int32_t truncate_candidates(std::span<const float> logits, const SamplingParams& params,
                            std::vector<int32_t>& order, std::vector<float>& probs) {
  const auto vocab = static_cast<int32_t>(logits.size());
  // Candidates sorted by logit, descending; top-k cuts the list before any probability work.
  order.resize(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int32_t count = vocab;
  if (params.top_k > 0 && params.top_k < vocab) {
    count = params.top_k;
    std::partial_sort(order.begin(), order.begin() + count, order.end(), better);
  } else if (params.top_p < 1.0f || params.min_p > 0.0f) {
    std::sort(order.begin(), order.end(), better);
  } else {
    // No filter: the order does not matter, only the maximum must come first (for scaling).
    // `better` orders best first, so the best is its minimum.
    std::iter_swap(order.begin(), std::min_element(order.begin(), order.end(), better));
  }
  // Probabilities of the candidates at temperature T.
  probs.resize(static_cast<size_t>(count));
  const float inv_t = 1.0f / params.temperature;
  const float max = logits[order[0]];
  for (int32_t i = 0; i < count; ++i) {
    const float x = logits[order[static_cast<size_t>(i)]];
    const double p =
        std::isinf(x) && x < 0 ? 0.0 : std::exp(static_cast<double>((x - max) * inv_t));
    probs[static_cast<size_t>(i)] = static_cast<float>(p);
  }
  // vLLM's order: min-p (relative to the top probability, so independent of normalisation), then
  // top-k (already applied to the candidate list), then top-p over the renormalised remainder.
  if (params.min_p > 0.0f) {
    const float threshold = params.min_p * probs[0];
    int32_t keep = 1;
    while (keep < count && probs[static_cast<size_t>(keep)] >= threshold) ++keep;
    count = keep;
  }
  if (params.top_p < 1.0f) {
    double remaining = 0;
    for (int32_t i = 0; i < count; ++i) remaining += probs[static_cast<size_t>(i)];
    double cum = 0;
    for (int32_t i = 0; i < count; ++i) {
      cum += probs[static_cast<size_t>(i)];
      if (cum >= params.top_p * remaining) {  // the shortest prefix reaching top_p; the first stays
        count = i + 1;
        break;
      }
    }
  }
  return count;
}

int32_t RequestSampler::draw(std::span<const float> logits) {
  if (params_.greedy()) {
    // First maximum: ties go to the lowest id, as torch.argmax does.
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const int32_t count = truncate_candidates(logits, params_, order_, scratch_);
  double mass = 0;
  for (int32_t i = 0; i < count; ++i) mass += scratch_[static_cast<size_t>(i)];
  // 53 random bits -> [0, mass).
  const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0) * mass;
  double cum = 0;
  for (int32_t i = 0; i < count; ++i) {
    cum += scratch_[static_cast<size_t>(i)];
    if (u < cum) return order_[static_cast<size_t>(i)];
  }
  return order_[static_cast<size_t>(count - 1)];
}

std::vector<float> RequestSampler::raw_logprobs(std::span<const float> logits,
                                                SampledToken& result) const {
  std::vector<float> logprobs;
  if (!params_.logprobs) return logprobs;
  logprobs.resize(logits.size());
  log_softmax(logits, logprobs);
  if (*params_.logprobs > 0) result.top_logprobs = top_k_entries(logprobs, *params_.logprobs);
  return logprobs;
}

SampledToken RequestSampler::sample(std::span<float> logits, std::span<const int32_t> prompt,
                                    std::span<const int32_t> output,
                                    std::span<const uint32_t> allowed) {
  SampledToken result;
  const std::vector<float> logprobs = raw_logprobs(logits, result);
  apply_processors(logits, prompt, output, allowed);
  result.token = draw(logits);
  if (params_.logprobs) result.logprob = logprobs[static_cast<size_t>(result.token)];
  return result;
}

SampledToken RequestSampler::verify(std::span<float> logits, std::span<const int32_t> prompt,
                                    std::span<const int32_t> output,
                                    std::span<const uint32_t> allowed, std::span<const float> q,
                                    int32_t x, bool& accepted) {
  PAGODA_CHECK(q.size() == logits.size(), "q of {} for a row of {}", q.size(), logits.size());
  if (params_.greedy()) {
    SampledToken t = sample(logits, prompt, output, allowed);
    accepted = t.token == x;
    return t;
  }
  SampledToken result;
  const std::vector<float> logprobs = raw_logprobs(logits, result);
  apply_processors(logits, prompt, output, allowed);
  // p over the whole vocabulary: the candidates' probabilities renormalised, 0 elsewhere.
  const int32_t count = truncate_candidates(logits, params_, order_, scratch_);
  double mass = 0;
  for (int32_t i = 0; i < count; ++i) mass += scratch_[static_cast<size_t>(i)];
  std::vector<float> p(logits.size(), 0.0f);
  for (int32_t i = 0; i < count; ++i) {
    p[static_cast<size_t>(order_[static_cast<size_t>(i)])] =
        static_cast<float>(scratch_[static_cast<size_t>(i)] / mass);
  }
  auto uniform = [this] { return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0); };
  const double u_accept = uniform();
  const double u_residual = uniform();
  const DraftVerdict v = verify_draft(p, q, x, u_accept, u_residual);
  accepted = v.accepted;
  result.token = v.token;
  if (params_.logprobs) result.logprob = logprobs[static_cast<size_t>(result.token)];
  return result;
}

}  // namespace pagoda
