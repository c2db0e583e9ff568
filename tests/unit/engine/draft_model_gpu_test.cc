// Draft-model speculative decoding on the GPU (label gpu, run on the device machine): stories260K
// with a deliberately different draft (its weights perturbed) and with itself as the draft. On a
// device the draft drafts greedily (engine_impl.h greedy_drafts: q one-hot), its argmax drawn on
// the device, and the target's rows stay device draws, so verification is "draw y from p, keep
// the draft iff y equals it" (engine_step.cc) with no logits on the host.
//
// Greedy outputs follow plain decoding under check_logprobs_close (engine_gpu_test.cc's rule: a
// verification step of 1 + k rows rounds differently from a one-row decode step). The sampled
// distribution is checked as draft_model_sampling_test.cc does on the CPU: per output position,
// 1,200 speculative requests against 1,200 plain ones (disjoint seeds), two-sample chi-square at
// significance 0.001; seeds fixed, so no flakes. An always-accepting verifier emits the draft's
// argmax and fails it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "draft_model_test_util.h"
#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "runtime/device_model.h"

namespace pagoda {
namespace {

using draft_test::perturbed_stories;
using engine_test::expect_workload_close;
using engine_test::kStories;
using engine_test::make_workload;
using engine_test::print_speculation;
using engine_test::run_alone;
using engine_test::run_batched_outputs;
using engine_test::small_engine;

constexpr int kLogprobs = 5;
constexpr double kStoriesTolerance = 0.4;  // engine_gpu_test.cc's bound for stories260K

#define REQUIRE_GPU()           \
  ASSERT_TRUE(cuda_available()) \
      << "no CUDA GPU: draft_model_gpu_test runs on the device machine (ctest -L gpu)"

EngineArgs gpu_engine(int budget, bool prefix_caching) {
  return small_engine(budget, prefix_caching, int64_t{64} << 20, "cuda", kStories);
}

EngineArgs gpu_draft_engine(const std::string& draft, int k, bool adaptive, int budget = 2048,
                            bool prefix_caching = false) {
  return draft_test::speculating(gpu_engine(budget, prefix_caching), "draft_model", draft, k,
                                 adaptive);
}

TEST(DraftModelGpu, GreedyFollowsPlainDecoding) {
  REQUIRE_GPU();
  const engine_test::Workload w = make_workload(11);
  std::vector<CompletionOutput> plain;
  {
    EngineCore engine(gpu_engine(2048, false));
    plain = run_alone(engine, w, kLogprobs);
  }
  // Batched with chunked prefill (budget 64) and whole prompts; a perturbed and an identical
  // draft; with and without prefix caching.
  struct Case {
    const std::string* draft;
    int budget;
    bool caching;
    bool adaptive;
  };
  for (const Case& c :
       {Case{&perturbed_stories(), 2048, false, false}, Case{&perturbed_stories(), 64, true, true},
        Case{&kStories, 2048, true, false}}) {
    const std::string what = fmt::format("draft {} budget {} caching {} adaptive {}",
                                         *c.draft == kStories ? "identical" : "perturbed", c.budget,
                                         c.caching, c.adaptive);
    EngineCore engine(gpu_draft_engine(*c.draft, 4, c.adaptive, c.budget, c.caching));
    const auto out = run_batched_outputs(engine, w, 300, kLogprobs);
    expect_workload_close(plain, out, kStoriesTolerance, what);
    const EngineStats st = engine.stats();
    print_speculation(what.c_str(), st, 0);
    EXPECT_GT(st.spec_decode_num_drafts, 0) << what;
    EXPECT_LT(st.num_steps, st.generation_tokens) << what;
    EXPECT_EQ(st.kv_cache_usage, 0.0) << what;
    if (*c.draft == kStories) {
      // Its own greedy drafts: rejected only where a verification row's rounding flips a near tie.
      EXPECT_GT(st.spec_decode_num_accepted_tokens, st.spec_decode_num_draft_tokens * 9 / 10)
          << what;
    }
  }
}

TEST(DraftModelGpu, SampledDistributionEqualsPlainSampling) {
  REQUIRE_GPU();
  constexpr int kRequests = 1200, kTokens = 6;
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant == 0 ? "temperature 1" : "top-k 12, top-p 0.9, T 0.8");
    SamplingParams p;
    p.ignore_eos = true;
    p.temperature = 1.0f;
    if (variant == 1) {
      p.temperature = 0.8f;
      p.top_k = 12;
      p.top_p = 0.9f;
    }
    const EngineStats spec_stats = draft_test::expect_same_token_distribution(
        gpu_draft_engine(perturbed_stories(), 3, false), gpu_engine(2048, false),
        "Once upon a time, Lily", p, kRequests, kTokens);
    print_speculation("sampled", spec_stats, 0);
    // Both branches run: drafts accepted and drafts rejected.
    EXPECT_GT(spec_stats.spec_decode_num_accepted_tokens, kRequests / 2);
    EXPECT_LT(spec_stats.spec_decode_num_accepted_tokens,
              spec_stats.spec_decode_num_draft_tokens * 9 / 10);
  }
}

}  // namespace
}  // namespace pagoda
