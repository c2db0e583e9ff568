// The quantized checkpoints of tests/data/tiny-quant on the GPU (label gpu, run on the device
// machine): the formats the GPU loads (FP8 W8A8 with per-channel or per-tensor weight scales,
// dynamic or static activations, and the FP8 KV cache with the checkpoint's scales; INT8 W8A8;
// GPTQ and AWQ 4-bit, act-order included) against
// transformers under vLLM's check_logprobs_close rule at the block sizes of both attention
// kernels; every other format is refused at load with an error naming it (its weight summary) and
// pointing to the CPU.
//
// The bound is golden_gpu_test's 0.5 (the GPU computes in bf16), or, where larger, 1.5x the CPU's
// own distance between W8A8 and W8A16 on the golden prompts (fp8_gpu_test.cc's rule): the GPU's
// small steps (m <= 8: decode) run the weight-only FP8 GEMV, where the reference quantizes the
// activations at every step, and its bf16 activations move some e4m3 roundings by a whole step.
// INT8 quantizes the activations at every m on both sides (the CPU's weight-only variant below
// still quantizes them: that distance is 0), so it is held to 0.5.
#include <algorithm>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "core/status.h"
#include "golden_check.h"
#include "model/config.h"
#include "model/cpu_decoder.h"
#include "model/registry.h"
#include "quant_fixtures.h"
#include "runtime/device_model.h"
#include "sampling/sampler.h"

namespace pagoda {
namespace {

using golden::QuantFixture;

constexpr double kGpuBound = 0.5;

/// The CPU model of `dir` with its projections weight-only (W8A16, as the GPU's decode GEMV).
std::unique_ptr<Model> cpu_weight_only(const std::string& dir, const LoadOptions& options,
                                       ThreadPool& pool) {
  const ModelConfig config = load_model_config(dir);
  ModelDefinition d = define_model(config, options.definition);
  for (LayerDef& l : d.layers)
    for (LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down})
      lin->quant.activations = ActivationQuant::kNone;
  return build_cpu_model(config, std::move(d), WeightStore::open_directory(dir), OpContext{&pool},
                         options.kv_cache);
}

/// Max over the golden prompts and their positions of |W8A16 - W8A8| over W8A8's top-10 ids, on
/// the CPU.
double w8a16_distance(const std::string& dir, const LoadOptions& options, ThreadPool& pool) {
  auto w8a8 = load_model(dir, options, pool);
  auto w8a16 = cpu_weight_only(dir, options, pool);
  const nlohmann::json golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  double err = 0;
  for (const nlohmann::json& c : golden.at("cases")) {
    const auto prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
    const auto len = static_cast<int64_t>(prompt.size()) + 1;
    golden::SequenceRunner a(*w8a8, len, 16), b(*w8a16, len, 16);
    const auto la = a.append(prompt), lb = b.append(prompt);
    for (size_t i = 0; i < prompt.size(); ++i) {
      for (const TokenLogprob& t : top_k_entries(la[i], 10)) {
        const auto id = static_cast<size_t>(t.token);
        err = std::max(err, static_cast<double>(std::abs(la[i][id] - lb[i][id])));
      }
    }
  }
  return err;
}

class QuantGoldenGpu : public ::testing::TestWithParam<QuantFixture> {};

TEST_P(QuantGoldenGpu, MatchesTransformersOrIsRefusedByName) {
  ASSERT_TRUE(cuda_available()) << "no CUDA GPU: run this test on the device machine (label gpu)";
  const QuantFixture& f = GetParam();
  const std::string dir = golden::quant_fixture_dir(f);
  ASSERT_TRUE(std::filesystem::exists(dir + "/golden.json"))
      << dir << " is missing: bench/device/make_quant_fixtures.sh writes it";
  ThreadPool pool(2);
  const LoadOptions options = golden::quant_load_options(dir);
  if (!f.gpu) {
    try {
      (void)load_model_on_device(dir, options, "cuda", pool);
      ADD_FAILURE() << f.name << " loaded on the GPU, which has no kernels for it";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      if (f.gpu_refusal != nullptr) {
        EXPECT_NE(what.find(f.gpu_refusal), std::string::npos) << what;
      } else {
        EXPECT_NE(what.find(f.summary), std::string::npos) << what;
        EXPECT_NE(what.find("do not run on the GPU"), std::string::npos) << what;
      }
    }
    return;
  }
  const double distance = f.w8a8 ? w8a16_distance(dir, options, pool) : 0.0;
  const double bound = std::max(kGpuBound, 1.5 * distance);
  std::printf("%s: CPU W8A8 vs W8A16 distance %.3f, GPU bound %.3f\n", f.name, distance, bound);
  for (int block_size : {16, 5}) {
    SCOPED_TRACE("block size " + std::to_string(block_size));
    auto model = load_model_on_device(dir, options, "cuda", pool);
    golden::check_model(*model, dir, {bound, false, /*most_steps=*/false}, block_size);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantGoldenGpu, ::testing::ValuesIn(golden::kQuantFixtures),
                         [](const ::testing::TestParamInfo<QuantFixture>& info) {
                           return golden::quant_test_name(info.param);
                         });

}  // namespace
}  // namespace pagoda
