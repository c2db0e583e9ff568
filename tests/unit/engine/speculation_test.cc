// Speculative decoding's host parts: the n-gram (prompt lookup) index on worked examples and
// against a brute-force lookup on random histories grown step by step, the adaptive choice of k,
// the spec_decode counters and the configuration's checks.
#include <gtest/gtest.h>

#include <random>

#include "core/status.h"
#include "engine/ngram_proposer.h"
#include "engine/speculation.h"
#include "engine/speculation_costs.h"

namespace pagoda {
namespace {

TEST(NgramIndex, WorkedExamples) {
  NgramIndex a(1, 2);
  // (5 6) ended at position 2 before: the next three tokens there.
  EXPECT_EQ(a.propose(std::vector<int32_t>{5, 6, 7, 5, 6}, 3), (std::vector<int32_t>{7, 5, 6}));
  // The continuation runs past the end: it repeats its own start.
  NgramIndex b(1, 2);
  EXPECT_EQ(b.propose(std::vector<int32_t>{8, 1, 1, 1}, 3), (std::vector<int32_t>{1, 1, 1}));
  // Nothing earlier: no drafts; k caps the count.
  NgramIndex c(2, 3);
  EXPECT_TRUE(c.propose(std::vector<int32_t>{1, 2, 3, 4}, 4).empty());
  EXPECT_EQ(c.propose(std::vector<int32_t>{1, 2, 3, 4, 2, 3}, 1), (std::vector<int32_t>{4}));
  // The longest n wins over a more recent shorter match: (1 2 3) occurred at 0..3 -> 9; (2 3)
  // alone most recently at 5..7 -> 7.
  NgramIndex d(2, 3);
  EXPECT_EQ(d.propose(std::vector<int32_t>{1, 2, 3, 9, 4, 2, 3, 7, 1, 2, 3}, 2),
            (std::vector<int32_t>{9, 4}));
  // The most recent occurrence among equal lengths.
  NgramIndex e(2, 2);
  EXPECT_EQ(e.propose(std::vector<int32_t>{4, 5, 1, 4, 5, 2, 4, 5}, 1), (std::vector<int32_t>{2}));
}

/// The definition, by brute force: the longest n in [lo, hi] whose suffix occurs earlier, its
/// most recent occurrence, the k tokens after it (repeating past the end).
std::vector<int32_t> reference(const std::vector<int32_t>& t, int lo, int hi, int k) {
  const int len = static_cast<int>(t.size());
  for (int n = std::min(hi, len - 1); n >= lo; --n) {
    for (int end = len - 1; end >= n; --end) {
      if (!std::equal(t.end() - n, t.end(), t.begin() + end - n)) continue;
      std::vector<int32_t> d;
      for (int p = end; static_cast<int>(d.size()) < k; ++p)
        d.push_back(p < len ? t[static_cast<size_t>(p)] : d[static_cast<size_t>(p - len)]);
      return d;
    }
  }
  return {};
}

TEST(NgramIndex, IncrementalIndexEqualsBruteForce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int lo = 1 + static_cast<int>(rng() % 3), hi = lo + static_cast<int>(rng() % 4);
    const int vocab = 2 + static_cast<int>(rng() % 6);
    NgramIndex index(lo, hi);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 30; ++i) tokens.push_back(static_cast<int32_t>(rng() % vocab));
    for (int step = 0; step < 60; ++step) {
      const int k = 1 + static_cast<int>(rng() % 6);
      ASSERT_EQ(index.propose(tokens, k), reference(tokens, lo, hi, k))
          << "trial " << trial << " step " << step;
      // One to four more tokens, as a step with accepted drafts appends.
      for (int j = static_cast<int>(rng() % 4); j >= 0; --j)
        tokens.push_back(static_cast<int32_t>(rng() % vocab));
    }
  }
}

TEST(SpeculationLength, ChoosesTheMostTokensPerCost) {
  EXPECT_NEAR(SpeculationLength::tokens_per_cost(0.8, 4, 0.1), 2.401, 1e-3);
  SpeculationLength s;
  EXPECT_EQ(s.choose(4, /*adaptive=*/false, 0.1), 4);
  for (int i = 0; i < 40; ++i) s.observe(4, 4);  // always accepted: a -> 1
  EXPECT_GT(s.acceptance(), 0.95);
  EXPECT_EQ(s.choose(4, true, 0.1), 4);
  for (int i = 0; i < 40; ++i) s.observe(2, 0);  // always rejected: a -> 0
  EXPECT_LT(s.acceptance(), 0.05);
  // k = 0, with a probe of one draft every kProbeInterval steps.
  int probes = 0;
  for (int i = 0; i < 4 * SpeculationLength::kProbeInterval; ++i) probes += s.choose(4, true, 0.1);
  EXPECT_EQ(probes, 4);
  // Rejected probes back off: 8, 16, 32, 64, 64 steps apart; an accepted draft restores 8.
  std::vector<int> gaps;
  for (int i = 0, last = 0; i < 8 + 16 + 32 + 64 + 64; ++i) {
    if (s.choose(4, true, 0.1) == 1) {
      gaps.push_back(i - last);
      last = i;
      s.observe(1, 0);
    }
  }
  EXPECT_EQ(gaps, (std::vector<int>{7, 16, 32, 64, 64}));
  // A deferred probe (the engine rations them by batch size) is asked for again at once.
  while (s.choose(4, true, 0.1) != 1) {
  }
  EXPECT_TRUE(s.probed());
  s.defer_probe();
  EXPECT_FALSE(s.probed());
  EXPECT_EQ(s.choose(4, true, 0.1), 1);
  EXPECT_TRUE(s.probed());
  s.observe(1, 1);
  int until = 0;
  while (s.choose(4, true, 0.1) != 1) ++until;
  EXPECT_LE(until, SpeculationLength::kProbeInterval);
  // A free row (cost 0) makes every draft worth it while a > 0.
  EXPECT_EQ(s.choose(4, true, 0.0), 4);
}

// The measured costs (speculation_costs.h) on the header's worked example, at a = 0, at a large
// batch whose verification rows cost nearly a step each, and their exploration.
// Each key's first kSkipped samples are dropped: observe past them.
void observe(SpeculationCosts& costs, int batch, int k, double seconds) {
  for (int i = 0; i <= SpeculationCosts::kSkipped; ++i) costs.observe(batch, k, seconds);
}

TEST(SpeculationCosts, ChoosesFromMeasuredCosts) {
  SpeculationCosts costs(4, 0.1);
  // Nothing measured: the prior 1 + 0.1 k.
  EXPECT_DOUBLE_EQ(costs.relative_cost(1, 3), 1.3);
  const std::vector<std::pair<double, int>> good{{0.8, 100}};
  EXPECT_EQ(costs.choose(1, good), 4);
  // The worked example: t(1, 0) = 4.2 ms, t(1, 4) = 6.5 ms.
  observe(costs, 1, 0, 4.2e-3);
  observe(costs, 1, 4, 6.5e-3);
  EXPECT_TRUE(costs.measured(1, 4));
  EXPECT_FALSE(costs.measured(1, 2));
  EXPECT_NEAR(costs.relative_cost(1, 2), 5.35 / 4.2, 1e-9);
  EXPECT_NEAR(costs.relative_cost(1, 4), 6.5 / 4.2, 1e-9);
  EXPECT_EQ(costs.choose(1, good), 4);
  // Only k = 2 measured beyond 0: k = 4 extrapolates its slope.
  SpeculationCosts slope(4, 0.1);
  observe(slope, 1, 0, 1.0);
  observe(slope, 1, 2, 1.5);
  EXPECT_NEAR(slope.relative_cost(1, 4), 2.0, 1e-12);
  EXPECT_NEAR(slope.relative_cost(1, 1), 1.25, 1e-12);
  // Room caps a request's drafts: with room 1 the longer lengths gain nothing over k = 1.
  EXPECT_EQ(costs.choose(1, std::vector<std::pair<double, int>>{{0.8, 1}}), 1);
  // a = 0: no length pays.
  EXPECT_EQ(costs.choose(1, std::vector<std::pair<double, int>>{{0.0, 100}}), 0);
  // Batch 128 (bucket 128): each draft run costs most of a step; the requests expect 3.36
  // tokens at k = 4 but pay 1 + 0.9 k: nothing pays (2.44 / 2.8 < 1 at k = 2, ...).
  for (int k = 0; k <= 4; ++k) observe(costs, 100, k, 6e-3 * (1 + 0.9 * k));
  std::vector<std::pair<double, int>> batch(100, {0.8, 100});
  EXPECT_EQ(costs.choose(100, batch), 0);
  // Buckets: 65..128 share one, 1 has its own.
  EXPECT_TRUE(costs.measured(128, 3));
  EXPECT_FALSE(costs.measured(129, 3));
  // Exploration: every kExploreInterval choices at a positive best, its neighbour once.
  SpeculationCosts explore(4, 0.1);
  int other = 0;
  for (int i = 0; i < 2 * SpeculationCosts::kExploreInterval; ++i)
    other += explore.choose(1, good) != 4;
  EXPECT_EQ(other, 2);
  // The first samples of a key and outliers are dropped.
  SpeculationCosts noisy(4, 0.1);
  noisy.observe(1, 0, 1.0);  // skipped (a graph capture)
  noisy.observe(1, 0, 1.0);  // skipped
  EXPECT_FALSE(noisy.measured(1, 0));
  noisy.observe(1, 0, 4e-3);
  noisy.observe(1, 0, 50e-3);  // outlier
  EXPECT_TRUE(noisy.measured(1, 0));
  observe(noisy, 1, 1, 5e-3);
  EXPECT_NEAR(noisy.relative_cost(1, 1), 1.25, 1e-12);
  EXPECT_NE(noisy.describe().find("batch <= 1: k=0 4.000 ms (n 1), k=1 5.000 ms (n 1)"),
            std::string::npos)
      << noisy.describe();
}

TEST(SpeculationCounters, CountsPerPosition) {
  SpeculationCounters c;
  c.accepted_per_pos.assign(3, 0);
  c.add(3, 2);
  c.add(2, 0);
  c.add(0, 0);  // no drafts: not a verification
  EXPECT_EQ(c.num_drafts, 2);
  EXPECT_EQ(c.num_draft_tokens, 5);
  EXPECT_EQ(c.num_accepted_tokens, 2);
  EXPECT_EQ(c.accepted_per_pos, (std::vector<int64_t>{1, 1, 0}));
}

TEST(SpeculativeConfig, ChecksNameTheKey) {
  SpeculativeConfig c;
  c.num_speculative_tokens = 4;
  EXPECT_NO_THROW(validate_speculative_config(c));
  auto message = [](const SpeculativeConfig& bad) {
    try {
      validate_speculative_config(bad);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  SpeculativeConfig bad = c;
  bad.method = "medusa";
  EXPECT_NE(message(bad).find("method 'medusa' is not supported"), std::string::npos);
  bad.method = "eagle3";  // a head directory is needed
  EXPECT_NE(message(bad).find("speculative_config.model: method eagle3 needs the draft's"),
            std::string::npos);
  bad = c;
  bad.num_speculative_tokens = 16;
  EXPECT_NE(message(bad).find("num_speculative_tokens must be in [1, 15]"), std::string::npos);
  bad = c;
  bad.prompt_lookup_min = 6;
  EXPECT_NE(message(bad).find("prompt_lookup_min=6 must be <= prompt_lookup_max=5"),
            std::string::npos);
}

}  // namespace
}  // namespace pagoda
