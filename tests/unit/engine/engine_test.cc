// EngineCore end to end on stories260K on the CPU (engine_gpu_test.cc: the GPU; batch invariance:
// batch_invariance_test.cc): prefix-cache reuse, stop strings, n > 1 forks, seeds, abort. To add
// a case: build an EngineArgs with small_engine() (engine_test_util.h), submit EngineRequests, and
// compare collect_result() outputs with a reference run of the request alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "../model/test_checkpoint.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "pagoda/llm.h"
#include "scheduler/request.h"

namespace pagoda {
namespace {

using engine_test::greedy;
using engine_test::small_engine;

TEST(Engine, PrefixCacheComputesOnlyTheSuffix) {
  EngineCore engine(small_engine());
  std::vector<int32_t> prefix{1};
  for (int i = 0; i < 95; ++i) prefix.push_back(3 + (i * 37) % 500);
  auto with_suffix = [&](int32_t a, int32_t b) {
    auto p = prefix;
    p.push_back(a);
    p.push_back(b);
    return p;
  };
  auto run = [&](std::vector<int32_t> prompt, std::string salt) {
    EngineRequest r;
    r.prompt_token_ids = std::move(prompt);
    r.params = greedy(8);
    r.cache_salt = std::move(salt);
    return collect_result(*engine.submit(std::move(r)));
  };
  const GenerateResult first = run(with_suffix(10, 11), "");
  const int64_t computed_before = engine.stats().prompt_tokens;
  const GenerateResult second = run(with_suffix(12, 13), "");
  // 96 prefix tokens = 6 full blocks are reused: only the 2-token suffix is computed.
  EXPECT_EQ(second.num_cached_tokens, 96);
  EXPECT_EQ(engine.stats().prompt_tokens - computed_before, 2);
  EngineCore fresh(small_engine(2048, false));
  EngineRequest alone;
  alone.prompt_token_ids = with_suffix(12, 13);
  alone.params = greedy(8);
  EXPECT_EQ(second.outputs[0].token_ids,
            collect_result(*fresh.submit(std::move(alone))).outputs[0].token_ids);
  // Another tenant (salt) shares nothing.
  const int64_t before_salted = engine.stats().prompt_tokens;
  const GenerateResult salted = run(with_suffix(12, 13), "tenant-b");
  EXPECT_EQ(salted.num_cached_tokens, 0);
  EXPECT_EQ(engine.stats().prompt_tokens - before_salted, 98);
  EXPECT_EQ(salted.outputs[0].token_ids, second.outputs[0].token_ids);
}

TEST(Engine, StopStringsSpanningTokensAreFoundAndRemoved) {
  LLM llm(small_engine());
  SamplingParams p = greedy(48);
  PromptInput prompt{"Once upon a time", {}};
  const CompletionOutput full = llm.generate({prompt}, p)[0].outputs[0];
  ASSERT_EQ(full.text.substr(0, 30), ", there was a little girl name");
  // "le gi" spans the tokens " little" and " girl".
  p.stop = {"le gi", "never matches"};
  const CompletionOutput stopped = llm.generate({prompt}, p)[0].outputs[0];
  EXPECT_EQ(stopped.text, ", there was a litt");
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.stop_reason, "le gi");
  // Streaming never shows a partial match: every delta concatenated is the final text.
  EngineRequest r;
  r.prompt = "Once upon a time";
  r.params = p;
  auto stream = llm.engine().submit(std::move(r));
  std::string streamed;
  while (auto out = stream->next()) {
    EXPECT_EQ(out->text.find("le g"), std::string::npos);
    streamed += out->text;
  }
  EXPECT_EQ(streamed, stopped.text);
}

TEST(Engine, BadWordsAreNeverGenerated) {
  LLM llm(small_engine());
  SamplingParams p = greedy(48);
  PromptInput prompt{"Once upon a time", {}};
  const CompletionOutput full = llm.generate({prompt}, p)[0].outputs[0];
  ASSERT_NE(full.text.find(" little girl"), std::string::npos) << full.text;
  // One word of two tokens and one of one: greedy decoding must route around both.
  p.bad_words = {"little girl", "there"};
  const CompletionOutput banned = llm.generate({prompt}, p)[0].outputs[0];
  EXPECT_EQ(banned.text.find("little girl"), std::string::npos) << banned.text;
  EXPECT_EQ(banned.text.find("there"), std::string::npos) << banned.text;
  EXPECT_NE(banned.text, full.text);
  // The same on a batch with other requests (the bans are per request).
  SamplingParams plain = greedy(48);
  const auto both = llm.generate({prompt, prompt}, {p, plain});
  EXPECT_EQ(both[0].outputs[0].text, banned.text);
  EXPECT_EQ(both[1].outputs[0].text, full.text);
}

TEST(Engine, AllowedTokenIdsAreTheOnlyOnesGenerated) {
  LLM llm(small_engine());
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams p = greedy(24);
    p.temperature = temperature;
    p.seed = 3;
    p.allowed_token_ids = std::vector<int32_t>{300, 301, 302};
    const CompletionOutput out =
        llm.generate({PromptInput{"Once upon a time", {}}}, p)[0].outputs[0];
    ASSERT_EQ(out.token_ids.size(), 24u);
    for (int32_t t : out.token_ids) EXPECT_TRUE(t >= 300 && t <= 302) << t;
  }
  SamplingParams empty = greedy(4);
  empty.allowed_token_ids = std::vector<int32_t>{};
  EXPECT_THROW((void)llm.generate({PromptInput{"Once", {}}}, empty), InvalidArgument);
}

TEST(Engine, StopTokenTextIsLeftOutWithOrWithoutSpecialTokens) {
  LLM llm(small_engine());
  SamplingParams p = greedy(12);
  PromptInput prompt{"Once upon a time", {}};
  // The text of each token, one streamed delta per token (stories260K's tokens are ASCII).
  EngineRequest r;
  r.prompt = prompt.text;
  r.params = p;
  auto stream = llm.engine().submit(std::move(r));
  std::vector<int32_t> ids;
  std::vector<std::string> deltas;
  while (auto out = stream->next()) {
    for (int32_t id : out->token_ids) ids.push_back(id);
    deltas.push_back(out->text);
  }
  ASSERT_EQ(ids.size(), deltas.size());
  size_t k = 4;
  while (std::find(ids.begin(), ids.begin() + static_cast<long>(k), ids[k]) != ids.begin() + k) ++k;
  ASSERT_LT(k, ids.size());
  std::string before;
  for (size_t i = 0; i < k; ++i) before += deltas[i];
  // vLLM: the token that ends the completion is not part of its text, and keeping special
  // tokens (what tool call parsers ask for) changes nothing else.
  p.stop_token_ids = {ids[k]};
  for (bool skip : {true, false}) {
    p.skip_special_tokens = skip;
    const CompletionOutput stopped = llm.generate({prompt}, p)[0].outputs[0];
    EXPECT_EQ(stopped.token_ids.size(), k + 1) << skip;
    EXPECT_EQ(stopped.text, before) << skip;
    EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  }
}

TEST(Engine, CompletionTextKeepsTheSpaceAfterThePrompt) {
  LLM llm(small_engine());
  const CompletionOutput out =
      llm.generate({PromptInput{"The big dog", {}}}, greedy(4))[0].outputs[0];
  EXPECT_EQ(out.text, " was a big,");  // transformers' decode of the ids alone strips the space
}

TEST(Engine, ForksShareThePromptAndGiveIndependentCompletions) {
  EngineCore engine(small_engine(2048, /*prefix_caching=*/false));
  std::vector<int32_t> prompt{1};
  for (int i = 0; i < 70; ++i) prompt.push_back(3 + (i * 13) % 500);
  EngineRequest r;
  r.prompt_token_ids = prompt;
  r.params.n = 4;
  r.params.temperature = 1.0f;
  r.params.max_tokens = 24;
  r.params.ignore_eos = true;
  r.params.seed = 42;
  const GenerateResult result = collect_result(*engine.submit(r));
  ASSERT_EQ(result.outputs.size(), 4u);
  // Without prefix caching, only forks can share: the prompt was computed once, not four times.
  EXPECT_EQ(engine.stats().prompt_tokens, 71);
  int distinct = 0;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(result.outputs[i].token_ids.size(), 24u);
    EXPECT_EQ(result.outputs[i].index, static_cast<int>(i));
    distinct += i == 0 || result.outputs[i].token_ids != result.outputs[0].token_ids;
  }
  EXPECT_EQ(distinct, 4);
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
  // Seeded: the same request gives the same four completions.
  r.request_id = "again";
  const GenerateResult again = collect_result(*engine.submit(r));
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(again.outputs[i].token_ids, result.outputs[i].token_ids);
}

TEST(Engine, SeedGivesTheSameOutputWhateverElseRuns) {
  EngineCore engine(small_engine(32));
  auto seeded = [] {
    EngineRequest r;
    r.prompt_token_ids = {1, 403, 407, 261, 378};
    r.params.temperature = 0.9f;
    r.params.top_p = 0.95f;
    r.params.max_tokens = 40;
    r.params.seed = 1234;
    return r;
  };
  const auto alone = collect_result(*engine.submit(seeded())).outputs[0].token_ids;
  std::vector<std::shared_ptr<OutputStream>> noise;
  for (int i = 0; i < 12; ++i) {
    EngineRequest r;
    r.prompt_token_ids = {1, static_cast<int32_t>(300 + i), 261};
    r.params.temperature = 1.2f;
    r.params.max_tokens = 30 + i;
    noise.push_back(engine.submit(std::move(r)));
  }
  const auto batched = collect_result(*engine.submit(seeded())).outputs[0].token_ids;
  for (auto& s : noise) (void)collect_result(*s);
  EXPECT_EQ(batched, alone);
}

TEST(Engine, AbortFreesBlocksAtOnce) {
  EngineCore engine(small_engine());
  EngineRequest r;
  r.request_id = "long";
  r.prompt_token_ids = {1, 403, 407};
  r.params = greedy(400);
  auto stream = engine.submit(std::move(r));
  ASSERT_TRUE(stream->next().has_value());  // it is running
  engine.abort("long");
  std::optional<FinishReason> reason;
  while (auto out = stream->next()) {
    if (out->finish_reason) reason = out->finish_reason;
  }
  EXPECT_EQ(reason, FinishReason::kAbort);
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
  engine.abort("long");  // unknown by now: ignored
  engine.abort("never-existed");
}

TEST(Engine, RejectsInvalidRequestsNamingTheField) {
  EngineCore engine(small_engine());
  auto error = [&](EngineRequest r) {
    try {
      (void)engine.submit(std::move(r));
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EngineRequest too_long;
  too_long.prompt_token_ids = std::vector<int32_t>(500, 5);
  too_long.params.max_tokens = 100;
  const std::string message = error(too_long);
  EXPECT_NE(message.find("512"), std::string::npos) << message;
  EXPECT_NE(message.find("500 in the prompt"), std::string::npos) << message;
  EXPECT_NE(message.find("100 max_tokens"), std::string::npos) << message;
  EngineRequest empty;
  EXPECT_NE(error(empty).find("prompt"), std::string::npos);
  EngineRequest bad_id;
  bad_id.prompt_token_ids = {1, 512};
  EXPECT_NE(error(bad_id).find("512"), std::string::npos);
  EngineRequest bad_temp;
  bad_temp.prompt_token_ids = {1};
  bad_temp.params.temperature = -1;
  EXPECT_EQ(error(bad_temp).rfind("temperature", 0), 0u);
  EngineRequest prioritized;  // vLLM's rule: a priority needs --scheduling-policy priority
  prioritized.prompt_token_ids = {1};
  prioritized.priority = 2;
  EXPECT_EQ(error(prioritized).rfind("priority", 0), 0u);
  // The engine still serves after rejecting.
  EngineRequest ok;
  ok.prompt_token_ids = {1, 403};
  ok.params = greedy(3);
  EXPECT_EQ(collect_result(*engine.submit(std::move(ok))).outputs[0].token_ids.size(), 3u);
}

TEST(Engine, PromptLogprobsAndLogprobs) {
  LLM llm(small_engine());
  SamplingParams p = greedy(3);
  p.logprobs = 5;
  p.prompt_logprobs = 2;
  const GenerateResult r = llm.generate({PromptInput{std::nullopt, {1, 403, 407, 261, 378}}}, p)[0];
  ASSERT_EQ(r.prompt_logprobs.size(), 5u);
  EXPECT_FALSE(r.prompt_logprobs[0].has_value());
  ASSERT_TRUE(r.prompt_logprobs[1].has_value());
  EXPECT_EQ(r.prompt_logprobs[1]->token, 403);
  EXPECT_NEAR(r.prompt_logprobs[1]->logprob, -0.243743, 1e-4);  // golden.json prefill_top10[0]
  EXPECT_EQ(r.prompt_logprobs[1]->top.size(), 2u);
  // Each prompt token's rank: 1 + the tokens likelier than it, so 1 exactly when it is the top.
  for (size_t i = 1; i < r.prompt_logprobs.size(); ++i) {
    const TokenLogprobs& t = *r.prompt_logprobs[i];
    ASSERT_GE(t.rank, 1) << i;
    EXPECT_EQ(t.rank == 1, t.top[0].first == t.token) << i;
    if (t.rank == 2) {
      EXPECT_EQ(t.top[1].first, t.token) << i;
    }
    if (t.rank > 2) {
      EXPECT_LT(t.logprob, t.top[1].second) << i;
    }
  }
  ASSERT_EQ(r.outputs[0].logprobs.size(), 3u);
  EXPECT_EQ(r.outputs[0].logprobs[0].token, 432);
  EXPECT_NEAR(r.outputs[0].logprobs[0].logprob, -0.031703, 1e-4);
  EXPECT_EQ(r.outputs[0].logprobs[0].top.size(), 5u);
}

// --dtype with a checkpoint on the CPU converts its weights at load: stories260K (float32) in
// bfloat16 gives nearby but different log-probabilities, and the bfloat16 tiny Llama in float32
// (an exact widening) gives the same ones within the kernels' summation differences.
TEST(Engine, DtypeConvertsACheckpointOnTheCpu) {
  auto run = [](const std::string& model, const std::string& dtype) {
    EngineArgs args = small_engine(2048, true, 64 << 20, "cpu", model);
    args.dtype = dtype;
    LLM llm(args);
    SamplingParams p = greedy(6, 1);
    return llm.generate({PromptInput{std::nullopt, {1, 403, 407, 261, 378}}}, p)[0].outputs[0];
  };
  const CompletionOutput f32 = run(engine_test::kStories, "auto");
  const CompletionOutput bf16 = run(engine_test::kStories, "bfloat16");
  ASSERT_EQ(f32.logprobs.size(), bf16.logprobs.size());
  double max_diff = 0;
  for (size_t i = 0; i < f32.logprobs.size(); ++i) {
    max_diff =
        std::max<double>(max_diff, std::abs(f32.logprobs[i].logprob - bf16.logprobs[i].logprob));
  }
  EXPECT_GT(max_diff, 0.0) << "the weights were not converted";
  EXPECT_LT(max_diff, 0.1);
  const std::string tiny = std::string(PAGODA_SOURCE_DIR) + "/tests/data/tiny/llama-bf16";
  const CompletionOutput as_bf16 = run(tiny, "auto");
  const CompletionOutput as_f32 = run(tiny, "float32");
  EXPECT_EQ(as_bf16.token_ids, as_f32.token_ids);
  for (size_t i = 0; i < as_bf16.logprobs.size(); ++i) {
    EXPECT_NEAR(as_bf16.logprobs[i].logprob, as_f32.logprobs[i].logprob, 1e-4) << i;
  }
}

// The model's context (the default and the limit of --max-model-len) is vLLM's derived one:
// max_position_embeddings, times the factor for the scalings that extend it (YaRN: the original
// length times the factor). Stories260K with YaRN over its 512 positions serves 2048.
TEST(Engine, MaxModelLenFollowsTheRopeScaling) {
  testing::TempDir dir;
  const std::filesystem::path src = engine_test::kStories;
  for (const char* f : {"model.safetensors", "tokenizer.json"})
    std::filesystem::copy_file(src / f, dir.path() / f);
  nlohmann::json config = nlohmann::json::parse(read_text_file((src / "config.json").string()));
  config["rope_parameters"] = {{"rope_theta", 10000.0},
                               {"rope_type", "yarn"},
                               {"factor", 4.0},
                               {"original_max_position_embeddings", 512}};
  testing::write_file(dir.path() / "config.json", config.dump());
  EngineArgs args = small_engine(2048, true, 64 << 20, "cpu", dir.str());
  EXPECT_EQ(EngineCore(args).max_model_len(), 2048);
  args.max_model_len = 1500;
  EXPECT_EQ(EngineCore(args).max_model_len(), 1500);
  args.max_model_len = 2049;
  try {
    EngineCore engine(args);
    ADD_FAILURE() << "--max-model-len beyond the context accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the model's context 2048"), std::string::npos)
        << e.what();
  }
  args.model = engine_test::kStories;  // no scaling: max_position_embeddings
  args.max_model_len = 0;
  EXPECT_EQ(EngineCore(args).max_model_len(), 512);
}

}  // namespace
}  // namespace pagoda
