// Beam search against Hugging Face transformers: golden.json's "beam_search" entries of the tiny
// checkpoints (tools/make_golden_fixtures.py, transformers' generate(num_beams=W,
// num_return_sequences=W, do_sample=False)) through the engine on the CPU. Each entry's W
// hypotheses must come back in the same order with the same tokens and scores within 1e-3, but
// where transformers' scores of two neighbouring hypotheses are within 2e-3 of each other (a near
// tie that rounding may order either way): there each side's hypothesis must be among the
// other's. Skipped, saying so, while the fixtures have no beam_search entries (they are made on
// the device machine: bench/device/make_fixtures.sh --add-beam-search).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "golden_check.h"
#include "pagoda/llm.h"

namespace pagoda {
namespace {

using nlohmann::json;

EarlyStopping early_stopping_of(const json& v) {
  if (v.is_boolean()) return v.get<bool>() ? EarlyStopping::kTrue : EarlyStopping::kFalse;
  return EarlyStopping::kNever;  // "never"
}

void check_beams(const json& entry, const GenerateResult& got, const std::string& what) {
  SCOPED_TRACE(what);
  const auto expected = entry.at("sequences").get<std::vector<std::vector<int32_t>>>();
  const auto scores = entry.at("sequences_scores").get<std::vector<double>>();
  ASSERT_EQ(got.outputs.size(), expected.size());
  auto near_tie = [&](size_t i) {
    return (i > 0 && std::abs(scores[i] - scores[i - 1]) < 2e-3) ||
           (i + 1 < scores.size() && std::abs(scores[i] - scores[i + 1]) < 2e-3);
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    const CompletionOutput& o = got.outputs[i];
    ASSERT_TRUE(o.beam_score.has_value());
    EXPECT_NEAR(*o.beam_score, scores[i], 1e-3) << "hypothesis " << i;
    if (o.token_ids == expected[i]) continue;
    EXPECT_TRUE(near_tie(i)) << "hypothesis " << i << " differs without a near tie";
    const bool found =
        std::any_of(got.outputs.begin(), got.outputs.end(),
                    [&](const CompletionOutput& x) { return x.token_ids == expected[i]; });
    EXPECT_TRUE(found) << "transformers' hypothesis " << i << " is not among ours";
  }
}

TEST(GoldenBeamSearch, TinyArchitecturesMatchTransformers) {
  int checked = 0;
  for (const char* name : golden::kTinyFixtures) {
    const std::string dir = golden::kSource + "/tests/data/tiny/" + name;
    const json golden = json::parse(read_text_file(dir + "/golden.json"));
    if (!golden.contains("beam_search")) continue;
    EngineArgs args;
    args.model = dir;
    args.device = "cpu";
    args.num_threads = 2;
    args.kv_cache_memory_bytes = int64_t{32} << 20;
    if (golden.contains("max_model_len"))
      args.max_model_len = golden.at("max_model_len").get<int64_t>();
    LLM llm(args);
    std::vector<PromptInput> prompts;
    std::vector<SamplingParams> params;
    for (const json& e : golden.at("beam_search")) {
      prompts.push_back({std::nullopt, e.at("prompt_ids").get<std::vector<int32_t>>()});
      SamplingParams p;
      p.use_beam_search = true;
      p.temperature = 0;
      p.n = e.at("num_beams").get<int>();
      p.length_penalty = e.at("length_penalty").get<float>();
      p.early_stopping = early_stopping_of(e.at("early_stopping"));
      p.max_tokens = e.at("max_new_tokens").get<int>();
      p.stop_token_ids = e.at("stop_token_ids").get<std::vector<int32_t>>();
      params.push_back(p);
    }
    // All of a fixture's entries in one batch: continuous batching with the beams of the others.
    const std::vector<GenerateResult> results = llm.generate(prompts, params);
    for (size_t i = 0; i < results.size(); ++i) {
      check_beams(golden.at("beam_search")[i], results[i],
                  std::string(name) + " beam case " + std::to_string(i));
      ++checked;
    }
  }
  if (checked == 0) {
    GTEST_SKIP() << "no beam_search entries in tests/data/tiny/*/golden.json yet: make them on the "
                    "device machine with bench/device/make_fixtures.sh --add-beam-search "
                    "(tools/make_golden_fixtures.py)";
  }
}

}  // namespace
}  // namespace pagoda
