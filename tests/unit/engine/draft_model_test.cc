// Draft-model speculative decoding (speculative_config method draft_model) on stories260K, CPU:
//  - greedy outputs equal plain decoding bit for bit (tokens and log-probabilities) with the model
//    drafting for itself and with a deliberately different draft (its weights perturbed, written to
//    a temporary directory), requests alone and in a batch, under preemption, with both executors;
//  - a draft identical to the target is always accepted (greedy) and the counters count it;
//  - dummy weights (--load-format dummy) apply to the draft too;
//  - stop strings, max_tokens and n > 1 give plain decoding's outputs;
//  - bad configurations are refused naming speculative_config.model.
// The statistical test of sampled requests is in draft_model_sampling_test.cc.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/status.h"
#include "draft_model_test_util.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using engine_test::expect_identical;
using engine_test::expect_speculation_same_in_process_and_worker;
using engine_test::kStories;
using engine_test::print_speculation;
using engine_test::run_alone;
using engine_test::small_engine;
using namespace draft_test;

/// Greedy requests: the workload's random prompts and three texts, 40 tokens, top-3 logprobs.
std::vector<EngineRequest> greedy_requests() {
  std::vector<EngineRequest> rs;
  const engine_test::Workload w = engine_test::make_workload(7);
  for (size_t i = 0; i < 6; ++i) {
    EngineRequest r;
    r.prompt_token_ids = w.prompts[i];
    r.params = engine_test::greedy(w.max_tokens[i] + 8, 3);
    rs.push_back(std::move(r));
  }
  for (const char* text : {"Once upon a time", "Tom had a red ball. He", "The sun was"})
    rs.push_back(text_request(text, engine_test::greedy(40, 3)));
  return rs;
}

TEST(DraftModel, GreedyEqualsPlainDecodingBitForBit) {
  const std::vector<EngineRequest> rs = greedy_requests();
  std::vector<CompletionOutput> plain;
  int64_t plain_steps = 0;
  {
    EngineCore engine(small_engine(512));
    plain = run_alone(engine, rs);
    plain_steps = engine.stats().num_steps;
  }
  for (const std::string& draft : {kStories, perturbed_stories()}) {
    for (bool adaptive : {false, true}) {
      SCOPED_TRACE(draft + (adaptive ? ", adaptive" : ", k = 4"));
      EngineCore engine(draft_engine(draft, 4, adaptive));
      expect_identical(plain, run_alone(engine, rs));
      const EngineStats s = engine.stats();
      print_speculation(draft == kStories ? "self draft" : "perturbed draft", s, plain_steps);
      EXPECT_GT(s.spec_decode_num_drafts, 0);
      EXPECT_EQ(s.kv_cache_usage, 0.0);
    }
    // All at once, with chunked prefills (a budget of 24 tokens) and mixed sequences: same tokens.
    EngineArgs args = draft_engine(draft, 3, true);
    args.max_num_batched_tokens = 24;
    EngineCore engine(args);
    std::vector<std::shared_ptr<OutputStream>> streams;
    for (const EngineRequest& r : rs) streams.push_back(engine.submit(r));
    for (size_t i = 0; i < rs.size(); ++i)
      EXPECT_EQ(collect_result(*streams[i]).outputs.at(0).token_ids, plain[i].token_ids) << i;
  }
}

TEST(DraftModel, IdenticalDraftIsAlwaysAcceptedAndCounted) {
  // The batch-invariant CPU kernels give the draft's rows the target's bits, so every greedy
  // draft holds: k = 4 drafts per verification, all accepted, until max_tokens cuts k.
  EngineCore engine(draft_engine(kStories, 4, false));
  const std::vector<EngineRequest> rs = greedy_requests();
  (void)run_alone(engine, rs);
  const EngineStats s = engine.stats();
  print_speculation("self draft, k = 4", s, 0);
  EXPECT_GT(s.spec_decode_num_drafts, 10);
  EXPECT_EQ(s.spec_decode_num_accepted_tokens, s.spec_decode_num_draft_tokens);
  ASSERT_EQ(s.spec_decode_num_accepted_tokens_per_pos.size(), 4u);
  int64_t sum = 0;
  for (const int64_t n : s.spec_decode_num_accepted_tokens_per_pos) sum += n;
  EXPECT_EQ(sum, s.spec_decode_num_accepted_tokens);
  // Each step emits up to 5 tokens: far fewer steps than tokens.
  int64_t tokens = 0;
  for (const EngineRequest& r : rs) tokens += r.params.max_tokens;
  EXPECT_LT(s.num_steps, tokens / 3);
}

TEST(DraftModel, PreemptionRecomputesTheDraft) {
  const std::vector<EngineRequest> rs = greedy_requests();
  std::vector<CompletionOutput> plain;
  {
    EngineCore engine(small_engine(2048, false));
    plain = run_alone(engine, rs);
  }
  // 12 blocks of 16 tokens for both models (1280 + 1280 bytes per token) and a max model length
  // of 128: nine requests at once preempt each other; with prefix caching on, resumed ones also
  // find their cached blocks.
  for (bool caching : {false, true}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    EngineArgs args = draft_engine(perturbed_stories(), 4, true);
    args.enable_prefix_caching = caching;
    args.max_num_batched_tokens = 64;
    args.kv_cache_memory_bytes = 12 * 16 * 2560;
    args.max_model_len = 128;
    EngineCore engine(args);
    std::vector<std::shared_ptr<OutputStream>> streams;
    for (const EngineRequest& r : rs) streams.push_back(engine.submit(r));
    for (size_t i = 0; i < rs.size(); ++i)
      EXPECT_EQ(collect_result(*streams[i]).outputs.at(0).token_ids, plain[i].token_ids) << i;
    EXPECT_GT(engine.stats().num_preemptions, 0);
    EXPECT_GT(engine.stats().spec_decode_num_accepted_tokens, 0);
  }
}

TEST(DraftModel, WorkerProcessEqualsInProcess) {
  std::vector<EngineRequest> rs = greedy_requests();
  rs.resize(5);
  for (uint64_t seed = 0; seed < 3; ++seed) {
    SamplingParams p;
    p.max_tokens = 30;
    p.seed = seed;
    p.logprobs = 2;
    p.temperature = 0.8f;
    p.top_k = 30;
    rs.push_back(text_request("Once upon a time", p));
  }
  expect_speculation_same_in_process_and_worker(draft_engine(perturbed_stories(), 4, true), rs);
}

TEST(DraftModel, DummyWeightsApplyToTheDraft) {
  // --load-format dummy: the target and its draft of the same config get different random
  // weights (seeds --seed and --seed + 1); greedy outputs equal plain dummy decoding.
  const std::vector<EngineRequest> rs = greedy_requests();
  EngineArgs plain_args = small_engine(512);
  plain_args.load_format = "dummy";
  std::vector<CompletionOutput> plain;
  {
    EngineCore engine(plain_args);
    plain = run_alone(engine, rs);
  }
  EngineArgs args = draft_engine(kStories, 3, false);
  args.load_format = "dummy";
  EngineCore engine(args);
  expect_identical(plain, run_alone(engine, rs));
  const EngineStats s = engine.stats();
  print_speculation("dummy target, dummy draft", s, 0);
  EXPECT_GT(s.spec_decode_num_drafts, 0);
  EXPECT_LT(s.spec_decode_num_accepted_tokens, s.spec_decode_num_draft_tokens);
}

TEST(DraftModel, QuantizedDraftKeepsGreedyOutputs) {
  // speculative_config.quantization (vLLM's key): the draft quantized at load (FP8 per channel);
  // it drafts differently, the target's greedy tokens stay plain decoding's bit for bit. A
  // method the draft cannot take fails at start-up naming it.
  const std::vector<EngineRequest> rs = greedy_requests();
  std::vector<CompletionOutput> plain;
  {
    EngineCore engine(small_engine(512));
    plain = run_alone(engine, rs);
  }
  EngineArgs args = draft_engine(kStories, 3, false);
  args.speculative_config->quantization = "fp8";
  args.speculative_config->enforce_eager = true;
  {
    EngineCore engine(args);
    expect_identical(plain, run_alone(engine, rs));
    print_speculation("fp8 draft", engine.stats(), 0);
    EXPECT_GT(engine.stats().spec_decode_num_accepted_tokens, 0);
  }
  args.speculative_config->quantization = "no-such-method";
  try {
    EngineCore engine(args);
    ADD_FAILURE() << "a draft quantization method that does not exist was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-method"), std::string::npos) << e.what();
  }
}

TEST(DraftModel, StopStringsMaxTokensAndSeveralCompletions) {
  std::vector<EngineRequest> rs;
  for (int max_tokens : {1, 2, 3, 5, 9}) {
    rs.push_back(text_request("Once upon a time", engine_test::greedy(max_tokens, 1)));
  }
  SamplingParams stop = engine_test::greedy(60);
  stop.stop = {"park", "."};
  rs.push_back(text_request("Lily went to the", stop));
  stop.stop = {"ball"};
  rs.push_back(text_request("Tom had a red", stop));
  SamplingParams n = engine_test::greedy(12);
  n.n = 3;
  n.temperature = 0.7f;
  n.seed = 5;
  rs.push_back(text_request("The dog", n));
  auto run = [&](EngineCore& engine) {
    std::vector<GenerateResult> out;
    for (const EngineRequest& r : rs) out.push_back(collect_result(*engine.submit(r)));
    return out;
  };
  std::vector<GenerateResult> plain;
  {
    EngineCore engine(small_engine(512));
    plain = run(engine);
  }
  EngineCore engine(draft_engine(perturbed_stories(), 4, false));
  const std::vector<GenerateResult> spec = run(engine);
  ASSERT_EQ(spec.size(), plain.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    ASSERT_EQ(spec[i].outputs.size(), plain[i].outputs.size()) << i;
    for (size_t c = 0; c < spec[i].outputs.size(); ++c) {
      EXPECT_EQ(spec[i].outputs[c].token_ids, plain[i].outputs[c].token_ids) << i << "/" << c;
      EXPECT_EQ(spec[i].outputs[c].text, plain[i].outputs[c].text) << i << "/" << c;
      EXPECT_EQ(spec[i].outputs[c].finish_reason, plain[i].outputs[c].finish_reason) << i;
    }
  }
  EXPECT_GT(engine.stats().spec_decode_num_drafts, 0);
}

std::string error_of(const EngineArgs& args) {
  try {
    EngineCore engine(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(DraftModel, BadConfigurationsAreRefused) {
  const std::string dir = temp_dir("draft_bad");
  EXPECT_NE(error_of(draft_engine(dir + "/missing", 2, true))
                .find("speculative_config.model '" + dir + "/missing' is not a model directory"),
            std::string::npos);
  EngineArgs no_model = draft_engine(kStories, 2, true);
  no_model.speculative_config->model.clear();
  EXPECT_NE(error_of(no_model).find("speculative_config.model: method draft_model needs"),
            std::string::npos);
  // Another vocabulary: a config of 1024 tokens with dummy weights (the target's too).
  std::string config;
  {
    std::ifstream in(kStories + "/config.json");
    config.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = config.find("\"vocab_size\": 512");
  ASSERT_NE(at, std::string::npos);
  config.replace(at, std::strlen("\"vocab_size\": 512"), "\"vocab_size\": 1024");
  std::ofstream(dir + "/config.json") << config;
  EngineArgs vocab = draft_engine(dir, 2, true);
  vocab.load_format = "dummy";
  EXPECT_NE(error_of(vocab).find("the draft's vocab_size 1024 differs from the target's 512"),
            std::string::npos)
      << error_of(vocab);
  // A directory without weights: the loader's error, named as the draft's.
  EXPECT_NE(error_of(draft_engine(dir, 2, true)).find("speculative_config.model: "),
            std::string::npos)
      << error_of(draft_engine(dir, 2, true));
}

}  // namespace
}  // namespace pagoda
