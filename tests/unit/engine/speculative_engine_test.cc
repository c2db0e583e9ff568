// Speculative decoding with the n-gram proposer (--speculative-config) on stories260K, CPU:
//  - greedy outputs equal plain decoding bit for bit (tokens and log-probabilities), requests
//    alone; tokens in a batch;
//  - a repetitive prompt gets drafts accepted and needs fewer steps (the figures are printed);
//  - seeded sampled requests (temperature, top-k/top-p, penalties, min_tokens) draw the same
//    tokens as without speculation: verification uses the random numbers plain decoding would;
//  - the statistical test: the token distributions of speculative and plain sampling, over
//    disjoint seeds, agree under a chi-square test at significance 0.001 per position (fixed
//    seeds: the test is deterministic);
//  - the worker-process executor gives the same outputs as the in-process one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "chi_square_test_util.h"
#include "core/status.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using engine_test::expect_identical;
using engine_test::print_speculation;
using engine_test::run_alone;
using engine_test::small_engine;

// A story that repeats itself, as prompt lookup likes.
constexpr const char* kRepetitive =
    "Once upon a time, there was a little girl named Lily. She liked to play in the park. One "
    "day, Lily went to the park with her mom. Once upon a time, there was a little girl named "
    "Lily. She liked to play in the park. One day, Lily went";

EngineArgs spec_engine(int k = 4, bool adaptive = false, const std::string& backend = "uni") {
  EngineArgs args = small_engine(512);
  SpeculativeConfig c;
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 3;
  c.adaptive = adaptive;
  args.speculative_config = c;
  args.distributed_executor_backend = backend;
  return args;
}

EngineRequest text_request(const std::string& text, const SamplingParams& p) {
  EngineRequest r;
  r.prompt = text;
  r.params = p;
  return r;
}

/// Greedy requests: the workload's random prompts and three texts, 48 tokens, top-3 logprobs.
std::vector<EngineRequest> greedy_requests() {
  std::vector<EngineRequest> rs;
  const engine_test::Workload w = engine_test::make_workload(5);
  for (size_t i = 0; i < 8; ++i) {
    EngineRequest r;
    r.prompt_token_ids = w.prompts[i];
    r.params = engine_test::greedy(w.max_tokens[i] + 8, 3);
    rs.push_back(std::move(r));
  }
  for (const char* text : {kRepetitive, "Once upon a time", "Tom had a red ball. Tom had a"})
    rs.push_back(text_request(text, engine_test::greedy(48, 3)));
  return rs;
}

TEST(SpeculativeEngine, GreedyNgramEqualsPlainDecodingBitForBit) {
  const std::vector<EngineRequest> rs = greedy_requests();
  std::vector<CompletionOutput> plain, spec;
  int64_t plain_steps = 0;
  {
    EngineCore engine(small_engine(512));
    plain = run_alone(engine, rs);
    plain_steps = engine.stats().num_steps;
  }
  for (bool adaptive : {false, true}) {
    SCOPED_TRACE(adaptive ? "adaptive" : "k = 4");
    EngineCore engine(spec_engine(4, adaptive));
    spec = run_alone(engine, rs);
    expect_identical(plain, spec);
    const EngineStats s = engine.stats();
    print_speculation(adaptive ? "greedy, adaptive k <= 4" : "greedy, k = 4", s, plain_steps);
    EXPECT_GT(s.spec_decode_num_accepted_tokens, 0);
    EXPECT_LT(s.num_steps, plain_steps);
    // The counters agree: per position, accepted drafts never grow with the position.
    int64_t sum = 0;
    ASSERT_EQ(s.spec_decode_num_accepted_tokens_per_pos.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      sum += s.spec_decode_num_accepted_tokens_per_pos[i];
      if (i > 0) {
        EXPECT_LE(s.spec_decode_num_accepted_tokens_per_pos[i],
                  s.spec_decode_num_accepted_tokens_per_pos[i - 1]);
      }
    }
    EXPECT_EQ(sum, s.spec_decode_num_accepted_tokens);
    EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
  }
  // All at once (batches of mixed speculating and plain sequences): the same tokens.
  EngineCore engine(spec_engine(4));
  std::vector<std::shared_ptr<OutputStream>> streams;
  for (const EngineRequest& r : rs) streams.push_back(engine.submit(r));
  for (size_t i = 0; i < rs.size(); ++i)
    EXPECT_EQ(collect_result(*streams[i]).outputs.at(0).token_ids, plain[i].token_ids) << i;
}

/// Sampled requests with seeds: plain settings, truncations, penalties and min_tokens.
std::vector<EngineRequest> seeded_requests() {
  std::vector<EngineRequest> rs;
  for (int variant = 0; variant < 4; ++variant) {
    for (uint64_t seed = 0; seed < 4; ++seed) {
      SamplingParams p;
      p.max_tokens = 40;
      p.seed = 1000 * static_cast<uint64_t>(variant) + seed;
      p.logprobs = 2;
      p.ignore_eos = variant != 3;
      p.temperature = variant == 0 ? 1.0f : 0.6f;
      if (variant == 1) {
        p.top_k = 20;
        p.top_p = 0.9f;
        p.min_p = 0.02f;
      }
      if (variant >= 2) {
        p.repetition_penalty = 1.2f;
        p.presence_penalty = 0.3f;
        p.frequency_penalty = 0.2f;
      }
      if (variant == 3) p.min_tokens = 20;
      rs.push_back(text_request(kRepetitive, p));
    }
  }
  return rs;
}

TEST(SpeculativeEngine, SeededSamplingDrawsTheSameTokens) {
  const std::vector<EngineRequest> rs = seeded_requests();
  std::vector<CompletionOutput> plain;
  int64_t plain_steps = 0;
  {
    EngineCore engine(small_engine(512));
    plain = run_alone(engine, rs);
    plain_steps = engine.stats().num_steps;
  }
  EngineCore engine(spec_engine(4));
  expect_identical(plain, run_alone(engine, rs));
  print_speculation("sampled, seeded, k = 4", engine.stats(), plain_steps);
  EXPECT_GT(engine.stats().spec_decode_num_accepted_tokens, 0);
}

TEST(SpeculativeEngine, SampledDistributionEqualsPlainSampling) {
  // 1200 requests per run; speculative ones with seeds 0.., plain ones with seeds 100000..: two
  // independent samples of each position's token. Under the null hypothesis (same
  // distribution) each position's statistic exceeds the 0.001 quantile with probability 0.001.
  constexpr int kRequests = 1200, kTokens = 6;
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant == 0 ? "temperature 1" : "top-k, top-p, penalties");
    std::map<int32_t, int> counts[2][kTokens];
    int64_t accepted = 0, drafts = 0;
    for (int spec = 0; spec < 2; ++spec) {
      EngineCore engine(spec == 1 ? spec_engine(4) : small_engine(512));
      std::vector<std::shared_ptr<OutputStream>> streams;
      for (int i = 0; i < kRequests; ++i) {
        SamplingParams p;
        p.max_tokens = kTokens;
        p.ignore_eos = true;
        p.temperature = variant == 0 ? 1.0f : 0.8f;
        p.seed = static_cast<uint64_t>(i + (spec == 1 ? 0 : 100000));
        if (variant == 1) {
          p.top_k = 10;
          p.top_p = 0.9f;
          p.repetition_penalty = 1.1f;
          p.frequency_penalty = 0.2f;
        }
        streams.push_back(engine.submit(text_request(kRepetitive, p)));
      }
      for (auto& s : streams) {
        const std::vector<int32_t> t = collect_result(*s).outputs.at(0).token_ids;
        ASSERT_EQ(t.size(), static_cast<size_t>(kTokens));
        for (int j = 0; j < kTokens; ++j) ++counts[spec][j][t[static_cast<size_t>(j)]];
      }
      if (spec == 1) {
        accepted = engine.stats().spec_decode_num_accepted_tokens;
        drafts = engine.stats().spec_decode_num_draft_tokens;
      }
    }
    std::printf("variant %d: %lld of %lld drafts accepted\n", variant,
                static_cast<long long>(accepted), static_cast<long long>(drafts));
    // Later positions come from verified drafts (fewer with penalties, which discourage the
    // repetition that prompt lookup bets on).
    EXPECT_GT(accepted, kRequests / 10);
    for (int j = 1; j < kTokens; ++j) {
      const auto [stat, df] = chi_square(counts[1][j], counts[0][j]);
      const double critical = chi_square_critical_001(df);
      std::printf("  token %d: chi-square %.1f, %d degrees of freedom, critical %.1f\n", j, stat,
                  df, critical);
      EXPECT_LT(stat, critical) << "token " << j;
    }
  }
}

TEST(SpeculativeEngine, WorkerProcessEqualsInProcess) {
  std::vector<EngineRequest> rs = greedy_requests();
  rs.resize(6);
  const std::vector<EngineRequest> sampled = seeded_requests();
  rs.insert(rs.end(), sampled.begin() + 8, sampled.begin() + 12);  // with penalties
  std::vector<CompletionOutput> out[2];
  for (int mp = 0; mp < 2; ++mp) {
    EngineCore engine(spec_engine(4, true, mp == 1 ? "mp" : "uni"));
    out[mp] = run_alone(engine, rs);
    EXPECT_GT(engine.stats().spec_decode_num_drafts, 0);
  }
  expect_identical(out[0], out[1]);
}

TEST(SpeculativeEngine, RefusesMethodsNotImplemented) {
  EngineArgs args = spec_engine();
  args.speculative_config->method = "medusa";
  try {
    EngineCore engine(args);
    ADD_FAILURE() << "medusa accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'medusa' is not supported"), std::string::npos);
  }
}

}  // namespace
}  // namespace pagoda
