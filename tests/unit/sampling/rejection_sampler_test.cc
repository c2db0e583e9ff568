// verify_draft (Leviathan et al.'s rule): the worked example, and the statistical test that the
// emitted token follows the target p whatever the draft distribution q (random q, one-hot q,
// q = p): a chi-square goodness-of-fit test over 200,000 draws on an 8-token vocabulary at
// significance 0.001, from a fixed seed (deterministic).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "sampling/rejection_sampler.h"

namespace pagoda {
namespace {

TEST(RejectionSampler, WorkedExample) {
  const std::vector<float> p{0.5f, 0.3f, 0.2f}, q{0.2f, 0.6f, 0.2f};
  // Accept b with probability 0.3 / 0.6 = 0.5.
  EXPECT_TRUE(verify_draft(p, q, 1, 0.49, 0.0).accepted);
  const DraftVerdict rejected = verify_draft(p, q, 1, 0.51, 0.99);
  EXPECT_FALSE(rejected.accepted);
  EXPECT_EQ(rejected.token, 0);  // the residual (0.3, 0, 0) / 0.3 is all a
  // p(x) >= q(x): always accepted.
  EXPECT_TRUE(verify_draft(p, q, 0, 0.999, 0.5).accepted);
}

std::vector<float> random_distribution(std::mt19937_64& rng, int n) {
  std::vector<float> d(static_cast<size_t>(n));
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  float sum = 0;
  for (float& x : d) sum += (x = u(rng) * u(rng));
  for (float& x : d) x /= sum;
  return d;
}

TEST(RejectionSampler, EmittedTokensFollowTheTarget) {
  constexpr int kVocab = 8, kDraws = 200000;
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const std::vector<float> p = random_distribution(rng, kVocab);
  for (int kind = 0; kind < 3; ++kind) {
    SCOPED_TRACE(kind == 0 ? "random q" : kind == 1 ? "one-hot q" : "q = p");
    std::vector<float> q = kind == 0 ? random_distribution(rng, kVocab) : p;
    if (kind == 1) q.assign(kVocab, 0.0f);
    std::vector<int> counts(kVocab, 0);
    int accepted = 0;
    double expected_acceptance = 0;
    for (int t = 0; t < kVocab; ++t) expected_acceptance += std::min(p[t], kind == 1 ? 0.0f : q[t]);
    for (int i = 0; i < kDraws; ++i) {
      int32_t x = 0;
      if (kind == 1) {
        x = 3;  // a deterministic drafter always proposes token 3
        q.assign(kVocab, 0.0f);
        q[3] = 1.0f;
      } else {
        std::discrete_distribution<int32_t> draft(q.begin(), q.end());
        x = draft(rng);
      }
      const DraftVerdict v = verify_draft(p, q, x, uniform(rng), uniform(rng));
      ++counts[static_cast<size_t>(v.token)];
      accepted += v.accepted;
    }
    if (kind == 1) expected_acceptance = p[3];
    EXPECT_NEAR(static_cast<double>(accepted) / kDraws, expected_acceptance, 0.01);
    double chi2 = 0;
    for (int t = 0; t < kVocab; ++t) {
      const double e = kDraws * static_cast<double>(p[static_cast<size_t>(t)]);
      chi2 += (counts[static_cast<size_t>(t)] - e) * (counts[static_cast<size_t>(t)] - e) / e;
    }
    EXPECT_LT(chi2, 24.32);  // chi-square with 7 degrees of freedom, upper 0.001 quantile
  }
}

}  // namespace
}  // namespace pagoda
