// EAGLE-1, EAGLE-3 and parallel drafters (speculative_config methods eagle, eagle3,
// parallel_draft) on stories260K, CPU, with tiny checkpoints written by eagle_test_util.h:
//  - greedy outputs equal plain decoding bit for bit (tokens and log-probabilities), requests alone
//    and all at once with chunked prefills, under preemption with and without prefix caching, in
//    a worker process; drafts are verified and counted;
//  - --load-format dummy builds every drafter (a parallel drafter without mask_token_id takes the
//    last id);
//  - sampled requests keep the target's distribution (chi-square against plain sampling, T = 1
//    and top-k / top-p);
//  - the benchmark switch bench_acceptance_rate keeps drafts at the rate asked for;
//  - bad heads are refused naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "chi_square_test_util.h"
#include "core/status.h"
#include "eagle_test_util.h"

namespace pagoda {
namespace {

using engine_test::expect_identical;
using engine_test::expect_speculation_same_in_process_and_worker;
using engine_test::kStories;
using engine_test::print_speculation;
using engine_test::run_alone;
using engine_test::small_engine;
using namespace eagle_test;

struct Drafter {
  const char* method;
  std::string dir;
};

std::vector<Drafter> drafters() {
  return {
      {"eagle", eagle1_head()}, {"eagle3", eagle3_head()}, {"parallel_draft", parallel_drafter()}};
}

/// Greedy requests: four random prompts of the workload and two texts, top-2 logprobs.
std::vector<EngineRequest> greedy_requests() {
  std::vector<EngineRequest> rs;
  const engine_test::Workload w = engine_test::make_workload(7);
  for (size_t i = 0; i < 4; ++i) {
    EngineRequest r;
    r.prompt_token_ids = w.prompts[i];
    r.params = engine_test::greedy(w.max_tokens[i] + 8, 2);
    rs.push_back(std::move(r));
  }
  for (const char* text : {"Once upon a time", "Tom had a red ball. He"})
    rs.push_back(draft_test::text_request(text, engine_test::greedy(40, 2)));
  return rs;
}

std::vector<CompletionOutput> plain_outputs(const std::vector<EngineRequest>& rs,
                                            const std::string& load_format = "auto") {
  EngineArgs args = small_engine(512);
  args.load_format = load_format;
  EngineCore engine(args);
  return run_alone(engine, rs);
}

TEST(EagleDrafters, GreedyEqualsPlainDecodingBitForBit) {
  const std::vector<EngineRequest> rs = greedy_requests();
  const std::vector<CompletionOutput> plain = plain_outputs(rs);
  for (const Drafter& d : drafters()) {
    SCOPED_TRACE(d.method);
    {
      EngineCore engine(spec_engine(d.method, d.dir, 4, false));
      expect_identical(plain, run_alone(engine, rs));
      const EngineStats s = engine.stats();
      print_speculation(d.method, s, 0);
      EXPECT_GT(s.spec_decode_num_drafts, 10);
      EXPECT_GT(s.spec_decode_num_accepted_tokens, 0);
      EXPECT_LT(s.spec_decode_num_accepted_tokens, s.spec_decode_num_draft_tokens);
      int64_t sum = 0;
      for (const int64_t n : s.spec_decode_num_accepted_tokens_per_pos) sum += n;
      EXPECT_EQ(sum, s.spec_decode_num_accepted_tokens);
    }
    // All at once, chunked prefills (a budget of 24 tokens), adaptive k: the same tokens.
    EngineArgs args = spec_engine(d.method, d.dir, 3, true);
    args.max_num_batched_tokens = 24;
    EngineCore engine(args);
    std::vector<std::shared_ptr<OutputStream>> streams;
    for (const EngineRequest& r : rs) streams.push_back(engine.submit(r));
    for (size_t i = 0; i < rs.size(); ++i)
      EXPECT_EQ(collect_result(*streams[i]).outputs.at(0).token_ids, plain[i].token_ids) << i;
    EXPECT_GT(engine.stats().spec_decode_num_drafts, 0);
  }
}

TEST(EagleDrafters, PreemptionAndPrefixCaching) {
  const std::vector<EngineRequest> rs = greedy_requests();
  std::vector<CompletionOutput> plain;
  {
    EngineCore engine(small_engine(2048, false));
    plain = run_alone(engine, rs);
  }
  for (const Drafter& d : drafters()) {
    for (bool caching : {false, true}) {
      SCOPED_TRACE(std::string(d.method) + (caching ? ", prefix caching" : ""));
      // 14 blocks of 16 tokens for both models and a max model length of 128: the requests at
      // once preempt each other; with caching, resumed ones find their cached blocks.
      EngineArgs args = spec_engine(d.method, d.dir, 4, true);
      args.enable_prefix_caching = caching;
      args.max_num_batched_tokens = 64;
      args.kv_cache_memory_bytes = 14 * 16 * 2560;
      args.max_model_len = 128;
      EngineCore engine(args);
      std::vector<std::shared_ptr<OutputStream>> streams;
      for (int copy = 0; copy < 2; ++copy)
        for (const EngineRequest& r : rs) streams.push_back(engine.submit(r));
      for (size_t i = 0; i < streams.size(); ++i) {
        EXPECT_EQ(collect_result(*streams[i]).outputs.at(0).token_ids,
                  plain[i % rs.size()].token_ids)
            << i;
      }
      EXPECT_GT(engine.stats().num_preemptions, 0);
      EXPECT_GT(engine.stats().spec_decode_num_drafts, 0);
    }
  }
}

TEST(EagleDrafters, WorkerProcessEqualsInProcess) {
  std::vector<EngineRequest> rs = greedy_requests();
  SamplingParams p;
  p.max_tokens = 24;
  p.seed = 3;
  p.temperature = 0.8f;
  p.top_k = 30;
  rs.push_back(draft_test::text_request("Once upon a time", p));
  for (const Drafter& d : drafters()) {
    SCOPED_TRACE(d.method);
    expect_speculation_same_in_process_and_worker(spec_engine(d.method, d.dir, 3, true), rs);
  }
}

TEST(EagleDrafters, DummyWeightsBuildEveryDrafter) {
  // --load-format dummy: random heads (EAGLE's config from its directory) and a parallel drafter
  // from stories260K's config, which has no mask_token_id (the last id, 511, masks).
  const std::vector<EngineRequest> rs = greedy_requests();
  const std::vector<CompletionOutput> plain = plain_outputs(rs, "dummy");
  for (const Drafter& d : {Drafter{"eagle", eagle1_head()}, Drafter{"eagle3", eagle3_head()},
                           Drafter{"parallel_draft", kStories}}) {
    SCOPED_TRACE(d.method);
    EngineArgs args = spec_engine(d.method, d.dir, 3, false);
    args.load_format = "dummy";
    EngineCore engine(args);
    expect_identical(plain, run_alone(engine, rs));
    EXPECT_GT(engine.stats().spec_decode_num_drafts, 0);
  }
}

TEST(EagleDrafters, BenchAcceptanceRateKeepsDraftsAtThatRate) {
  // Each draft is kept with probability a after the verifier ran; the first rejected one ends
  // the step. So position 0 is accepted in a fraction a of the verifications, and position j + 1
  // in a fraction a of those that kept position j.
  std::vector<EngineRequest> rs;
  for (int i = 0; i < 12; ++i) {
    SamplingParams p = engine_test::greedy(80);
    p.ignore_eos = true;
    rs.push_back(draft_test::text_request(i % 2 ? "Once upon a time" : "The sun was", p));
  }
  for (const double a : {0.0, 0.7, 1.0}) {
    SCOPED_TRACE(a);
    EngineArgs args = spec_engine("eagle", eagle1_head(), 4, false);
    args.speculative_config->bench_acceptance_rate = a;
    EngineCore engine(args);
    std::vector<std::shared_ptr<OutputStream>> streams;
    for (const EngineRequest& r : rs) streams.push_back(engine.submit(r));
    for (auto& s : streams) EXPECT_EQ(collect_result(*s).outputs.at(0).token_ids.size(), 80u);
    const EngineStats s = engine.stats();
    print_speculation("bench_acceptance_rate", s, 0);
    ASSERT_GT(s.spec_decode_num_drafts, 100);
    const auto& pos = s.spec_decode_num_accepted_tokens_per_pos;
    ASSERT_EQ(pos.size(), 4u);
    const double first =
        static_cast<double>(pos[0]) / static_cast<double>(s.spec_decode_num_drafts);
    std::printf("  a = %.1f: position 0 kept in %.3f of %lld verifications, then %.3f %.3f %.3f\n",
                a, first, static_cast<long long>(s.spec_decode_num_drafts),
                pos[0] ? static_cast<double>(pos[1]) / static_cast<double>(pos[0]) : 0.0,
                pos[1] ? static_cast<double>(pos[2]) / static_cast<double>(pos[1]) : 0.0,
                pos[2] ? static_cast<double>(pos[3]) / static_cast<double>(pos[2]) : 0.0);
    EXPECT_NEAR(first, a, 0.06);
    if (a > 0) {
      EXPECT_NEAR(static_cast<double>(pos[1]) / static_cast<double>(pos[0]), a, 0.08);
    } else {
      EXPECT_EQ(s.spec_decode_num_accepted_tokens, 0);
    }
  }
}

TEST(EagleDrafters, BadHeadsAreRefused) {
  auto error_of = [](const EngineArgs& args) -> std::string {
    try {
      EngineCore engine(args);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  // A head of two layers.
  const std::string dir = draft_test::temp_dir("eagle_bad");
  nlohmann::json c = stories_config();
  c["num_hidden_layers"] = 2;
  std::ofstream(dir + "/config.json") << c.dump();
  EngineArgs two = spec_engine("eagle", dir, 2, true);
  two.load_format = "dummy";
  EXPECT_NE(error_of(two).find("field 'num_hidden_layers' is 2: pagoda runs EAGLE heads of one "
                               "layer"),
            std::string::npos)
      << error_of(two);
  // A draft vocabulary past the target's.
  c["num_hidden_layers"] = 1;
  c["draft_vocab_size"] = 600;
  std::ofstream(dir + "/config.json") << c.dump();
  EngineArgs vocab = spec_engine("eagle3", dir, 2, true);
  vocab.load_format = "dummy";
  EXPECT_NE(error_of(vocab).find("field 'draft_vocab_size' is 600, past vocab_size 512"),
            std::string::npos)
      << error_of(vocab);
  // A parallel drafter checkpoint without its mask token.
  EXPECT_NE(error_of(spec_engine("parallel_draft", kStories, 2, true))
                .find("field 'mask_token_id' is missing"),
            std::string::npos);
  // A head directory without weights.
  c.erase("draft_vocab_size");
  std::ofstream(dir + "/config.json") << c.dump();
  EXPECT_NE(error_of(spec_engine("eagle", dir, 2, true)).find("speculative_config.model: "),
            std::string::npos);
}

SamplingParams variant_params(int variant) {
  SamplingParams p;
  p.ignore_eos = true;
  p.temperature = 1.0f;
  if (variant == 1) {
    p.temperature = 0.8f;
    p.top_k = 12;
    p.top_p = 0.9f;
  }
  return p;
}

TEST(EagleDrafterSampling, DistributionEqualsPlainSampling) {
  // As DraftModelSampling: per output position, 1,200 speculative requests against 1,200 plain
  // ones (disjoint seeds), two-sample chi-square at significance 0.001; the seeds are fixed, so
  // the outcome is deterministic.
  constexpr int kRequests = 1200, kTokens = 5;
  const char* const names[] = {"temperature 1", "top-k 12, top-p 0.9, T 0.8"};
  auto run = [&](const EngineArgs& args, int variant, uint64_t seed_base,
                 std::map<int32_t, int>(&counts)[kTokens]) {
    EngineCore engine(args);
    std::vector<std::shared_ptr<OutputStream>> streams;
    for (int i = 0; i < kRequests; ++i) {
      SamplingParams p = variant_params(variant);
      p.max_tokens = kTokens;
      p.seed = seed_base + static_cast<uint64_t>(i);
      streams.push_back(engine.submit(draft_test::text_request("Once upon a time, Lily", p)));
    }
    for (auto& s : streams) {
      const std::vector<int32_t> t = collect_result(*s).outputs.at(0).token_ids;
      EXPECT_EQ(t.size(), static_cast<size_t>(kTokens));
      for (size_t j = 0; j < t.size() && j < static_cast<size_t>(kTokens); ++j) ++counts[j][t[j]];
    }
    return engine.stats();
  };
  for (int variant = 0; variant < 2; ++variant) {
    std::map<int32_t, int> plain[kTokens];
    (void)run(small_engine(512), variant, 100000, plain);
    for (const Drafter& d : drafters()) {
      SCOPED_TRACE(std::string(d.method) + ", " + names[variant]);
      std::map<int32_t, int> spec[kTokens];
      const EngineStats s = run(spec_engine(d.method, d.dir, 3, false), variant, 0, spec);
      print_speculation(d.method, s, 0);
      // Both branches of the rule run: drafts accepted, and drafts rejected (residual draws). The
      // random EAGLE heads keep 1.5-4.5% of their drafts here (about 100-300), the parallel
      // drafter about 30%.
      EXPECT_GT(s.spec_decode_num_accepted_tokens, kRequests / 20);
      EXPECT_LT(s.spec_decode_num_accepted_tokens, s.spec_decode_num_draft_tokens * 9 / 10);
      for (int j = 1; j < kTokens; ++j) {
        const auto [stat, df] = chi_square(spec[j], plain[j]);
        const double critical = chi_square_critical_001(df);
        std::printf("  %s, %s, token %d: chi-square %.1f, %d degrees of freedom, critical %.1f\n",
                    d.method, names[variant], j, stat, df, critical);
        EXPECT_LT(stat, critical) << "token " << j;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
