// The sampler: greedy, seeded reproducibility, and that temperature, top-k, top-p and min-p sample
// from exactly the distribution their definitions give (chi-square against the computed
// distribution on a small vocabulary); penalties and logit_bias change logits as specified.
// To add a distribution case: add a SamplingCase to kCases; the expected distribution is computed
// independently by reference_distribution().
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "core/status.h"

namespace pagoda {
namespace {

const std::vector<float> kLogits = {2.0f, 1.5f, 1.2f, 0.3f, 0.0f, -0.5f, -1.0f, -3.0f};

/// The distribution vLLM's definitions give, computed in double with plain loops (no sorting
/// tricks).
std::vector<double> reference_distribution(const std::vector<float>& logits,
                                           const SamplingParams& p) {
  const size_t n = logits.size();
  std::vector<double> prob(n);
  double z = 0;
  for (size_t i = 0; i < n; ++i)
    z += prob[i] = std::exp(static_cast<double>(logits[i]) / p.temperature);
  for (auto& x : prob) x /= z;
  std::vector<bool> keep(n, true);
  const double pmax = *std::max_element(prob.begin(), prob.end());
  for (size_t i = 0; i < n; ++i) {
    if (prob[i] < p.min_p * pmax) keep[i] = false;
  }
  if (p.top_k > 0) {
    for (size_t i = 0; i < n; ++i) {
      size_t larger = 0;
      for (size_t j = 0; j < n; ++j) larger += prob[j] > prob[i];
      if (larger >= static_cast<size_t>(p.top_k)) keep[i] = false;
    }
  }
  if (p.top_p < 1) {
    double kept_mass = 0;
    for (size_t i = 0; i < n; ++i) kept_mass += keep[i] ? prob[i] : 0;
    // Token i survives if the mass of kept tokens strictly more likely than it is below top_p.
    std::vector<bool> next = keep;
    for (size_t i = 0; i < n; ++i) {
      if (!keep[i]) continue;
      double above = 0;
      for (size_t j = 0; j < n; ++j)
        above += (keep[j] && prob[j] > prob[i]) ? prob[j] / kept_mass : 0;
      if (above >= p.top_p) next[i] = false;
    }
    keep = next;
  }
  double mass = 0;
  for (size_t i = 0; i < n; ++i) mass += keep[i] ? prob[i] : 0;
  for (size_t i = 0; i < n; ++i) prob[i] = keep[i] ? prob[i] / mass : 0;
  return prob;
}

struct SamplingCase {
  const char* name;
  float temperature, top_p, min_p;
  int top_k;
};

const SamplingCase kCases[] = {
    {"temperature 1", 1.0f, 1.0f, 0.0f, 0}, {"temperature 0.5", 0.5f, 1.0f, 0.0f, 0},
    {"temperature 2", 2.0f, 1.0f, 0.0f, 0}, {"top_k 3", 1.0f, 1.0f, 0.0f, 3},
    {"top_p 0.7", 1.0f, 0.7f, 0.0f, 0},     {"min_p 0.2", 1.0f, 1.0f, 0.2f, 0},
    {"all together", 0.8f, 0.9f, 0.05f, 5},
};

TEST(Sampler, MatchesTheDistributionByChiSquare) {
  constexpr int kDraws = 40000;
  for (const auto& c : kCases) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.top_k = c.top_k;
    p.seed = 1234;
    const auto expected = reference_distribution(kLogits, p);
    RequestSampler sampler(p, {}, 0);
    std::vector<int> counts(kLogits.size(), 0);
    for (int i = 0; i < kDraws; ++i) {
      std::vector<float> logits = kLogits;
      counts[static_cast<size_t>(sampler.sample(logits, {}, {}).token)]++;
    }
    double chi2 = 0;
    int support = 0;
    for (size_t t = 0; t < kLogits.size(); ++t) {
      if (expected[t] == 0) {
        EXPECT_EQ(counts[t], 0) << c.name << ": token " << t << " is outside the support";
        continue;
      }
      ++support;
      const double e = expected[t] * kDraws;
      chi2 += (counts[t] - e) * (counts[t] - e) / e;
    }
    // Critical values of chi-square at p = 0.001 for 1..7 degrees of freedom.
    const double critical[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};
    ASSERT_GE(support, 2) << c.name;
    EXPECT_LT(chi2, critical[support - 1]) << c.name << " chi2=" << chi2 << " df=" << support - 1;
  }
}

TEST(Sampler, ChiSquareDetectsAWrongDistribution) {
  // The test above can fail: sampling at temperature 1 judged against temperature 0.5 is rejected.
  SamplingParams p;
  p.seed = 5;
  SamplingParams other = p;
  other.temperature = 0.5f;
  const auto wrong = reference_distribution(kLogits, other);
  RequestSampler sampler(p, {}, 0);
  std::vector<int> counts(kLogits.size(), 0);
  for (int i = 0; i < 40000; ++i) {
    std::vector<float> logits = kLogits;
    counts[static_cast<size_t>(sampler.sample(logits, {}, {}).token)]++;
  }
  double chi2 = 0;
  for (size_t t = 0; t < kLogits.size(); ++t)
    chi2 += std::pow(counts[t] - wrong[t] * 40000, 2) / (wrong[t] * 40000);
  EXPECT_GT(chi2, 24.32);
}

TEST(Sampler, WideLogitRangesAndMaskedTokensAtLowTemperature) {
  // Without a filter the sampler scales by the best logit: the worst one used to be taken, and
  // exp((best - worst) / T) overflowed once the range over T passed ~88 (a -100 logit bias, a
  // masked token, a low temperature), which made every draw return the last candidate.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {-80.0f, 20.0f, -inf, 19.9f, 0.0f};
  SamplingParams p;
  p.temperature = 0.05f;
  p.seed = 9;
  RequestSampler sampler(p, {}, 0);
  std::vector<int> counts(logits.size(), 0);
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) {
    std::vector<float> row = logits;
    counts[static_cast<size_t>(sampler.sample(row, {}, {}).token)]++;
  }
  // p(1) = 1 / (1 + e^-2) = 0.8808, p(3) = 0.1192; the rest never.
  EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);
  const double e1 = kDraws / (1.0 + std::exp(-2.0)), e3 = kDraws - e1;
  const double chi2 = std::pow(counts[1] - e1, 2) / e1 + std::pow(counts[3] - e3, 2) / e3;
  EXPECT_LT(chi2, 10.83) << counts[1] << " / " << counts[3];  // p = 0.001, one degree of freedom
}

TEST(Sampler, GreedyTakesTheFirstMaximum) {
  SamplingParams p;
  p.temperature = 0;
  RequestSampler sampler(p, {}, 0);
  std::vector<float> logits = {0.5f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(sampler.sample(logits, {}, {}).token, 1);
}

TEST(Sampler, SeedReproducesAndDiffers) {
  auto run = [](uint64_t seed) {
    SamplingParams p;
    p.seed = seed;
    p.temperature = 1.5f;
    RequestSampler sampler(p, {}, 99);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> logits = kLogits;
      out.push_back(sampler.sample(logits, {}, {}).token);
    }
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, PenaltiesAndBiasChangeLogitsAsSpecified) {
  // Greedy with logprobs reports the raw distribution; the processors show in the chosen token.
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{7, 10.0f}};
  RequestSampler biased(p, {}, 0);
  std::vector<float> logits = kLogits;
  EXPECT_EQ(biased.sample(logits, {}, {}).token, 7);
  EXPECT_FLOAT_EQ(logits[7], -3.0f + 10.0f);

  SamplingParams rep;
  rep.temperature = 0;
  rep.repetition_penalty = 2.0f;
  RequestSampler repeat(rep, {}, 0);
  logits = kLogits;
  const std::vector<int32_t> prompt = {0, 6};
  (void)repeat.sample(logits, prompt, {});
  EXPECT_FLOAT_EQ(logits[0], 1.0f);   // positive: divided
  EXPECT_FLOAT_EQ(logits[6], -2.0f);  // negative: multiplied
  EXPECT_FLOAT_EQ(logits[1], 1.5f);   // unseen: unchanged

  SamplingParams pen;
  pen.temperature = 0;
  pen.presence_penalty = 0.5f;
  pen.frequency_penalty = 0.25f;
  RequestSampler penalised(pen, {}, 0);
  logits = kLogits;
  const std::vector<int32_t> output = {1, 1, 1, 2};
  const std::vector<int32_t> prompt0 = {0};
  (void)penalised.sample(logits, prompt0, output);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);                     // prompt tokens are not penalised
  EXPECT_FLOAT_EQ(logits[1], 1.5f - 3 * 0.25f - 0.5f);  // count 3
  EXPECT_FLOAT_EQ(logits[2], 1.2f - 0.25f - 0.5f);      // count 1
}

TEST(Sampler, MinTokensMasksEosAndStopTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 2;
  p.stop_token_ids = {1};
  RequestSampler sampler(p, {0}, 0);
  std::vector<float> logits = kLogits;
  EXPECT_EQ(sampler.sample(logits, {}, std::vector<int32_t>{5}).token, 2);  // 0 (eos) and 1 masked
  logits = kLogits;
  EXPECT_EQ(sampler.sample(logits, {}, std::vector<int32_t>{5, 5}).token, 0);  // min reached
}

TEST(Sampler, LogprobsAreOfTheRawDistribution) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 3;
  p.logit_bias = {{7, 100.0f}};
  RequestSampler sampler(p, {}, 0);
  std::vector<float> logits = kLogits;
  const SampledToken t = sampler.sample(logits, {}, {});
  EXPECT_EQ(t.token, 7);
  std::vector<float> lp(kLogits.size());
  log_softmax(kLogits, lp);
  EXPECT_FLOAT_EQ(t.logprob, lp[7]);
  ASSERT_EQ(t.top_logprobs.size(), 3u);
  EXPECT_EQ(t.top_logprobs[0].token, 0);
  EXPECT_FLOAT_EQ(t.top_logprobs[0].logprob, lp[0]);
}

TEST(SamplingParams, ValidationNamesTheParameter) {
  auto error = [](auto mutate) {
    SamplingParams p;
    mutate(p);
    try {
      p.validate(100);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error([](SamplingParams&) {}), "");
  EXPECT_EQ(error([](SamplingParams& p) { p.temperature = -1; }).rfind("temperature", 0), 0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.temperature = NAN; }).rfind("temperature", 0), 0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.top_p = 0; }).rfind("top_p", 0), 0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.top_p = 1.5f; }).rfind("top_p", 0), 0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.top_k = -2; }).rfind("top_k", 0), 0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.min_p = 2; }).rfind("min_p", 0), 0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.max_tokens = 0; }).rfind("max_tokens", 0), 0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.min_tokens = 20; }).rfind("min_tokens", 0), 0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.logprobs = 21; }).rfind("logprobs", 0), 0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.n = 0; }).rfind("n ", 0), 0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.logit_bias[100] = 1; }).rfind("logit_bias", 0), 0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.presence_penalty = 3; }).rfind("presence_penalty", 0),
            0u);
  EXPECT_EQ(
      error([](SamplingParams& p) { p.repetition_penalty = 0; }).rfind("repetition_penalty", 0),
      0u);
  EXPECT_EQ(error([](SamplingParams& p) { p.stop = {""}; }).rfind("stop", 0), 0u);
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

TEST(Sampler, StructuredOutputBitmaskAllowsOnlyItsTokens) {
  // 40 tokens (two mask words): only 3, 17 and 33 may be drawn, greedy or sampled.
  std::vector<float> base(40);
  for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<float>(i % 7);
  const std::vector<uint32_t> allowed = {(1u << 3) | (1u << 17), 1u << (33 - 32)};
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.seed = 5;
    p.logprobs = 1;
    RequestSampler sampler(p, {}, 0);
    std::map<int32_t, int> seen;
    for (int i = 0; i < 200; ++i) {
      std::vector<float> row = base;
      const SampledToken t = sampler.sample(row, {}, {}, allowed);
      ++seen[t.token];
      // Log-probabilities stay those of the raw row.
      std::vector<float> raw(base.size());
      log_softmax(base, raw);
      EXPECT_FLOAT_EQ(t.logprob, raw[static_cast<size_t>(t.token)]);
    }
    for (const auto& [token, n] : seen) EXPECT_TRUE(token == 3 || token == 17 || token == 33);
    if (temperature == 0.0f) {
      EXPECT_EQ(seen.size(), 1u);
      EXPECT_EQ(seen.begin()->first, 33);  // logits 3, 3 and 5: the largest allowed
    } else {
      EXPECT_EQ(seen.size(), 3u);
    }
  }
  std::vector<float> row = base;
  EXPECT_THROW(apply_token_bitmask(row, std::vector<uint32_t>(1)), Internal);  // wrong width
}

}  // namespace
}  // namespace pagoda
