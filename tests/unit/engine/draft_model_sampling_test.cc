// Draft-model speculative decoding of sampled requests, CPU, stories260K with a deliberately
// different draft (its weights perturbed): verification with min(1, p/q) and the residual keeps
// the target's distribution exactly. The statistical test compares, per output position, the
// tokens of 1,200 speculative requests with those of 1,200 plain ones (disjoint seeds) by a
// two-sample chi-square test at significance 0.001: a correct engine fails one such check with
// probability 0.001 over the choice of seeds, so the 5 positions x 3 settings here fail together
// with probability at most 1.5%; the seeds are fixed, so the outcome is deterministic (no flakes).
// Also: seeded requests reproduce themselves with a draft model.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "draft_model_test_util.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using engine_test::print_speculation;
using engine_test::run_alone;
using engine_test::small_engine;
using namespace draft_test;

SamplingParams variant_params(int variant) {
  SamplingParams p;
  p.ignore_eos = true;
  p.temperature = 1.0f;
  if (variant == 1) {  // truncations
    p.temperature = 0.8f;
    p.top_k = 12;
    p.top_p = 0.9f;
  }
  if (variant == 2) {  // min-p and penalties (the draft's q ignores the penalties)
    p.min_p = 0.05f;
    p.repetition_penalty = 1.2f;
    p.frequency_penalty = 0.3f;
  }
  return p;
}

TEST(DraftModelSampling, DistributionEqualsPlainSampling) {
  constexpr int kRequests = 1200, kTokens = 6;
  const char* const names[] = {"temperature 1", "top-k 12, top-p 0.9, T 0.8",
                               "min-p 0.05, penalties"};
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(names[variant]);
    const EngineStats spec_stats = expect_same_token_distribution(
        draft_engine(perturbed_stories(), 3, false), small_engine(512), "Once upon a time, Lily",
        variant_params(variant), kRequests, kTokens);
    print_speculation(names[variant], spec_stats, 0);
    // Both branches of the rule run: drafts accepted, and drafts rejected (residual draws).
    EXPECT_GT(spec_stats.spec_decode_num_accepted_tokens, kRequests / 2);
    EXPECT_LT(spec_stats.spec_decode_num_accepted_tokens,
              spec_stats.spec_decode_num_draft_tokens * 9 / 10);
  }
}

TEST(DraftModelSampling, SeededRequestsReproduceThemselves) {
  std::vector<EngineRequest> rs;
  for (int variant = 0; variant < 3; ++variant) {
    for (uint64_t seed = 0; seed < 3; ++seed) {
      SamplingParams p = variant_params(variant);
      p.max_tokens = 24;
      p.seed = seed;
      p.logprobs = 2;
      rs.push_back(text_request("Tom had a red ball.", p));
    }
  }
  std::vector<CompletionOutput> out[2];
  for (int run = 0; run < 2; ++run) {
    EngineCore engine(draft_engine(perturbed_stories(), 4, true));
    // The second run submits them all at once: a request's draws do not depend on its batch.
    if (run == 0) {
      out[run] = run_alone(engine, rs);
    } else {
      std::vector<std::shared_ptr<OutputStream>> streams;
      for (const EngineRequest& r : rs) streams.push_back(engine.submit(r));
      for (auto& s : streams) out[run].push_back(collect_result(*s).outputs.at(0));
    }
  }
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(out[0][i].token_ids, out[1][i].token_ids) << i;
}

}  // namespace
}  // namespace pagoda
