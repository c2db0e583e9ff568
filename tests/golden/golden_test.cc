// Golden tests against Hugging Face transformers: greedy tokens and top-k log-probabilities.
//
// stories260K (a trained model, fp32): greedy ids identical, top-5 per step and top-10 per prompt
// position within 1e-4. The tiny random-weight checkpoints of tests/data/tiny (one per
// architecture, written by tools/make_golden_fixtures.py) are compared as vLLM's
// check_logprobs_close does: tokens equal until the first divergence, where each side's token must
// be in the other's top-5, and log-probabilities within 1e-3 up to there. To add a case: add a
// fixture to tools/make_golden_fixtures.py, regenerate on the device machine
// (bench/device/make_fixtures.sh) and list its directory in kTinyFixtures.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../unit/model/test_checkpoint.h"
#include "core/mapped_file.h"
#include "golden_check.h"
#include "model/config.h"
#include "model/model.h"
#include "pagoda/llm.h"
#include "sampling/sampler.h"

namespace pagoda {
namespace {

using golden::check_model;
using golden::kSource;
using golden::Tolerance;
using nlohmann::json;

void check_cpu(const std::string& dir, Tolerance tol, int block_size) {
  ThreadPool pool(2);
  auto model = load_model(dir, golden::fixture_load_options(dir), pool);
  check_model(*model, dir, tol, block_size);
}

TEST(Golden, Stories260K) {
  for (int block_size : {16, 1, 5})
    check_cpu(kSource + "/models/stories260K", {1e-4, true}, block_size);
}

TEST(Golden, TinyArchitectures) {
  for (const char* name : golden::kTinyFixtures)
    check_cpu(kSource + "/tests/data/tiny/" + name, {1e-3, false}, 16);
}

// Phi-3, Gemma-2, YaRN and dynamic NTK (golden::kFamilyFixtures), one test per fixture, under the
// tiny fixtures' rule; skipped while the fixture has not been generated yet.
class GoldenFamily : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenFamily, MatchesTransformers) {
  const std::string dir = kSource + "/tests/data/tiny/" + GetParam();
  if (!std::filesystem::exists(dir))
    GTEST_SKIP() << dir << " not generated yet (bench/device/make_fixtures.sh)";
  // First the RoPE tables alone: what transformers' rotary embedding last used (golden.json's
  // rope_debug) against rope_tables at the fixture's max_model_len, so that a scaling that
  // disagrees is named before the logits disagree.
  const json golden = json::parse(read_text_file(dir + "/golden.json"));
  if (golden.contains("rope_debug") && golden.at("rope_debug").contains("inv_freq")) {
    const json& hf = golden.at("rope_debug");
    const ModelConfig config = load_model_config(dir);
    const RopeTables ours = rope_tables(config.rope, config.head_dim,
                                        golden::fixture_load_options(dir).definition.max_model_len);
    const auto theirs = hf.at("inv_freq").get<std::vector<double>>();
    ASSERT_EQ(ours.inv_freq.size(), theirs.size()) << hf.at("rope_type");
    for (size_t i = 0; i < theirs.size(); ++i)
      EXPECT_NEAR(ours.inv_freq[i], theirs[i], 1e-6 * theirs[i]) << "inv_freq " << i;
    EXPECT_NEAR(ours.attention_factor, hf.at("attention_scaling").get<double>(), 1e-6);
  }
  for (int block_size : {16, 5}) check_cpu(dir, {1e-3, false}, block_size);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenFamily, ::testing::ValuesIn(golden::kFamilyFixtures),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(Golden, Stories260KThroughTheEngineInOneBatch) {
  // All golden prompts submitted at once to the engine (continuous batching, chunked prefill with
  // a small budget) give the reference tokens and top-5 log-probabilities.
  EngineArgs args;
  args.model = kSource + "/models/stories260K";
  args.device = "cpu";  // the 1e-4 bound is the CPU's (golden_gpu_test covers the GPU)
  args.num_threads = 2;
  args.max_num_batched_tokens = 8;
  args.block_size = 4;
  LLM llm(args);
  const json golden = json::parse(read_text_file(args.model + "/golden.json"));
  std::vector<PromptInput> prompts;
  std::vector<SamplingParams> params;
  for (const json& c : golden.at("cases")) {
    prompts.push_back({std::nullopt, c.at("prompt_ids").get<std::vector<int32_t>>()});
    SamplingParams p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.logprobs = 5;
    p.max_tokens = static_cast<int>(c.at("greedy_ids").size());
    params.push_back(p);
  }
  const auto results = llm.generate(prompts, params);
  for (size_t i = 0; i < results.size(); ++i) {
    const json& c = golden.at("cases")[i];
    const CompletionOutput& out = results[i].outputs.at(0);
    EXPECT_EQ(out.token_ids, c.at("greedy_ids").get<std::vector<int32_t>>()) << i;
    EXPECT_EQ(out.finish_reason, FinishReason::kLength);
    for (size_t step = 0; step < out.logprobs.size(); ++step) {
      const json& top = c.at("step_top5")[step];
      ASSERT_EQ(out.logprobs[step].top.size(), 5u);
      for (size_t k = 0; k < 5; ++k) {
        EXPECT_EQ(out.logprobs[step].top[k].first, top.at("ids")[k].get<int32_t>());
        EXPECT_NEAR(out.logprobs[step].top[k].second, top.at("logprobs")[k].get<double>(), 1e-4);
      }
    }
  }
}

// Sliding windows reach each layer's attention as config.json assigns them (ModelConfig::
// layer_window): a tiny Mistral with a 4-key window on both layers, on layer 1 only (layer_types),
// and on none. No HF reference here (the fixtures have no window; the CPU kernel's window is tested
// against its reference): positions 0-3 see at most 4 keys, so all three agree there; from
// position 4 on, each differs from the others.
TEST(Golden, SlidingWindowPerLayer) {
  const std::string src = kSource + "/tests/data/tiny/mistral-mqa";
  const json base = json::parse(read_text_file(src + "/config.json"));
  ASSERT_EQ(base.at("num_hidden_layers").get<int>(), 2);
  auto run = [&](const json& config, const std::string& name) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("pagoda_window_" + name + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(src + "/model.safetensors", dir / "model.safetensors",
                               std::filesystem::copy_options::overwrite_existing);
    testing::write_file(dir / "config.json", config.dump());
    ThreadPool pool(2);
    auto model = load_model(dir.string(), LoadOptions{}, pool);
    golden::SequenceRunner runner(*model, 16, 4);
    auto lp = runner.append({1, 17, 230, 41, 99, 5, 300, 7, 12, 401});
    std::filesystem::remove_all(dir);
    return lp;
  };
  json all = base, one = base;
  all["sliding_window"] = one["sliding_window"] = 4;
  one["layer_types"] = {"full_attention", "sliding_attention"};
  const auto full = run(base, "full"), windowed = run(all, "all"), layer1 = run(one, "one");
  auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    float d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
  };
  for (size_t pos = 0; pos < full.size(); ++pos) {
    SCOPED_TRACE(::testing::Message() << "position " << pos);
    if (pos < 4) {
      EXPECT_EQ(max_diff(full[pos], windowed[pos]), 0.0f);
      EXPECT_EQ(max_diff(full[pos], layer1[pos]), 0.0f);
    } else {
      EXPECT_GT(max_diff(full[pos], windowed[pos]), 1e-4f);
      EXPECT_GT(max_diff(full[pos], layer1[pos]), 1e-4f);
      EXPECT_GT(max_diff(windowed[pos], layer1[pos]), 1e-4f);
    }
  }
}

}  // namespace
}  // namespace pagoda
