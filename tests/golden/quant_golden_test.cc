// Quantized checkpoints in the real layouts against transformers, on the CPU: each fixture of
// tests/data/tiny-quant (golden::kQuantFixtures; tools/make_quant_fixtures.py writes them, with the
// references computed on the exactly dequantized weights) loads as the format its config declares
// and gives transformers' greedy tokens and log-probabilities, under golden_check.h's rule (tokens
// equal until a divergence where each side's token is in the other's top-5, and equal for at least
// half the steps) within 1e-3 for the weight-only formats; W8A8 and the FP8 KV cache within 0.25
// teacher-forced along transformers' tokens, then the rule without the half-the-steps clause
// (quant_fixtures.h says why). A missing fixture fails: nothing is skipped.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "golden_check.h"
#include "model/config.h"
#include "model/kv_cache_scales.h"
#include "model/loader/safetensors.h"
#include "model/model.h"
#include "model/registry.h"
#include "quant_fixtures.h"

namespace pagoda {
namespace {

using golden::QuantFixture;
using nlohmann::json;

class QuantGolden : public ::testing::TestWithParam<QuantFixture> {};

TEST_P(QuantGolden, MatchesTransformers) {
  const QuantFixture& f = GetParam();
  const std::string dir = golden::quant_fixture_dir(f);
  ASSERT_TRUE(std::filesystem::exists(dir + "/golden.json"))
      << dir << " is missing: write it with bench/device/make_quant_fixtures.sh on the device "
      << "machine (docs/engine.md, \"Quantized golden fixtures\")";
  const LoadOptions options = golden::quant_load_options(dir);
  // The format as the engine reads the checkpoint's config: never dense.
  const ModelDefinition definition = define_model(load_model_config(dir), options.definition);
  EXPECT_NE(definition.weight_summary().find(f.summary), std::string::npos)
      << definition.weight_summary();
  const json golden = json::parse(read_text_file(dir + "/golden.json"));
  if (golden.contains("kv_scales")) {
    // The per-layer KV scales the engine reads are the ones the reference quantized K and V with.
    const WeightStore store = WeightStore::open_directory(dir);
    KVScaleSource source;
    const auto scales = read_kv_cache_scales(definition, store, DType::kF8E4M3, false, &source);
    EXPECT_EQ(source.from_checkpoint, static_cast<int>(definition.layers.size()));
    for (size_t l = 0; l < scales.size(); ++l) {
      const json& ref = golden.at("kv_scales").at(std::to_string(l));
      EXPECT_EQ(scales[l].k, ref[0].get<float>()) << "layer " << l;
      EXPECT_EQ(scales[l].v, ref[1].get<float>()) << "layer " << l;
    }
  }
  ThreadPool pool(2);
  auto model = load_model(dir, options, pool);
  for (int block_size : {16, 5}) {
    SCOPED_TRACE("block size " + std::to_string(block_size));
    if (!f.w8a8) {
      golden::check_model(*model, dir, {golden::kWeightOnly, false}, block_size);
      continue;
    }
    // W8A8: one flipped activation rounding may part the greedy tokens at a near-tie, so every
    // step is compared along transformers' tokens (teacher-forced), then the greedy rule without
    // its most-steps clause.
    for (const json& c : golden.at("cases")) {
      const double err = golden::teacher_forced_error(*model, c, block_size);
      std::printf("%s: %zu-token prompt, teacher-forced max |dlogprob| %.2e\n", f.name,
                  c.at("prompt_ids").size(), err);
      EXPECT_LE(err, golden::kW8A8);
    }
    golden::check_model(*model, dir, {golden::kW8A8, false, /*most_steps=*/false}, block_size);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantGolden, ::testing::ValuesIn(golden::kQuantFixtures),
                         [](const ::testing::TestParamInfo<QuantFixture>& info) {
                           return golden::quant_test_name(info.param);
                         });

// Every fixture directory of tests/data/tiny-quant is listed in kQuantFixtures (a fixture added to
// the tool but not to the table would go untested).
TEST(QuantGolden, EveryFixtureIsListed) {
  const std::string root = golden::kSource + "/tests/data/tiny-quant";
  ASSERT_TRUE(std::filesystem::is_directory(root)) << root << " is missing";
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(std::any_of(std::begin(golden::kQuantFixtures), std::end(golden::kQuantFixtures),
                            [&](const QuantFixture& f) { return name == f.name; }))
        << name << " is not in golden::kQuantFixtures";
  }
}

}  // namespace
}  // namespace pagoda
