// 4-bit GPTQ and AWQ checkpoints on the GPU against the CPU's reference path (label gpu, the device
// machine): tiny Llama checkpoints written in the real formats (tests/unit/model/
// quant_checkpoint.h: GPTQ v1 with groups 32 / 64 / 128 / per-channel, sym and asym, act-order
// with one g_idx shared by q/k/v and gate/up as AutoGPTQ writes it; AWQ GEMM), loaded by both
// backends. A 20-token prefill runs the GPU's large-m path (dequantize + cuBLASLt), the greedy
// decode steps after it the fused W4 GEMVs (act-order: with the gather of x).
//
// The bound is the FP8 GPU test's (vLLM's check_logprobs_close between the backends): greedy
// tokens equal until the first divergence, where each side's token is in the other's top-5, and
// log-probabilities within 0.5 over the CPU's top-10 at every prompt position and top-5 at every
// decode step. The GPU's activations are bf16, the CPU's fp32; the weights are the same exactly.
// And --load-format dummy --quantization gptq|awq loads and runs on the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "golden_check.h"
#include "model/model.h"
#include "quant_checkpoint.h"
#include "runtime/device_model.h"
#include "sampling/sampler.h"

namespace pagoda {
namespace {

using namespace quant_checkpoint;  // NOLINT

constexpr double kLogprobTolerance = 0.5;
constexpr int kBlockSize = 16;
constexpr size_t kDecodeSteps = 8;

std::vector<int32_t> top_ids(const std::vector<float>& v, size_t k) {
  std::vector<int32_t> ids;
  for (const TokenLogprob& t : top_k_entries(v, static_cast<int>(k))) ids.push_back(t.token);
  return ids;
}

double top_error(const std::vector<float>& cpu, const std::vector<float>& gpu, size_t k) {
  double err = 0;
  for (int32_t id : top_ids(cpu, k)) {
    const auto i = static_cast<size_t>(id);
    err = std::isnan(gpu[i]) ? INFINITY
                             : std::max(err, std::abs(static_cast<double>(gpu[i]) - cpu[i]));
  }
  return err;
}

bool contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

void compare(Model& cpu, Model& gpu, const std::vector<int32_t>& prompt) {
  const int64_t max_len = static_cast<int64_t>(prompt.size() + kDecodeSteps) + 1;
  golden::SequenceRunner on_cpu(cpu, max_len, kBlockSize), on_gpu(gpu, max_len, kBlockSize);
  const auto prefill_cpu = on_cpu.append(prompt);
  const auto prefill_gpu = on_gpu.append(prompt);
  double err = 0;
  for (size_t i = 0; i < prompt.size(); ++i)
    err = std::max(err, top_error(prefill_cpu[i], prefill_gpu[i], 10));
  EXPECT_LE(err, kLogprobTolerance) << "prefill of " << prompt.size() << " tokens";
  std::vector<float> last_cpu = prefill_cpu.back(), last_gpu = prefill_gpu.back();
  for (size_t step = 0; step < kDecodeSteps; ++step) {
    const int32_t tc = golden::argmax(last_cpu), tg = golden::argmax(last_gpu);
    if (tc != tg) {
      EXPECT_TRUE(contains(top_ids(last_cpu, 5), tg)) << "step " << step << ": GPU token " << tg;
      EXPECT_TRUE(contains(top_ids(last_gpu, 5), tc)) << "step " << step << ": CPU token " << tc;
      return;
    }
    EXPECT_LE(top_error(last_cpu, last_gpu, 5), kLogprobTolerance) << "step " << step;
    last_cpu = on_cpu.append({tc}).back();
    last_gpu = on_gpu.append({tg}).back();
  }
}

json gptq_config(int64_t group, bool desc_act, bool sym) {
  return {{"quant_method", "gptq"}, {"bits", 4},  {"group_size", group},
          {"desc_act", desc_act},   {"sym", sym}, {"checkpoint_format", "gptq"}};
}
json awq_config(int64_t group) {
  return {{"quant_method", "awq"},
          {"bits", 4},
          {"group_size", group},
          {"version", "gemm"},
          {"zero_point", true}};
}

TEST(W4Gpu, CheckpointsMatchTheCpu) {
  ASSERT_TRUE(cuda_available()) << "no CUDA GPU: run this test on the device machine (label gpu)";
  ThreadPool pool(2);
  struct Case {
    std::string name;
    json config;
    Quantizer quantize;
  };
  const Case cases[] = {
      {"gptq g128 sym", gptq_config(128, false, true), gptq(128, false, true)},
      {"gptq g64 asym act-order", gptq_config(64, true, false), gptq(64, true, false)},
      {"gptq g32 sym act-order", gptq_config(32, true, true), gptq(32, true, true)},
      {"gptq per-channel asym", gptq_config(-1, false, false), gptq(-1, false, false)},
      {"awq g128", awq_config(128), awq(128)},
      {"awq g32", awq_config(32), awq(32)},
  };
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 20; ++i) prompt.push_back((i * 13 + 5) % 64);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    testing::TempDir quant_dir, dense_dir;
    write_pair(c.config, c.quantize, quant_dir, dense_dir);
    LoadOptions options;
    options.dtype = DType::kBF16;
    auto cpu = load_model_on_device(quant_dir.str(), options, "cpu", pool);
    auto gpu = load_model_on_device(quant_dir.str(), options, "cuda", pool);
    compare(*cpu, *gpu, prompt);
    compare(*cpu, *gpu, {3, 7, 11});  // a short prompt: the GEMV path for the prefill too
  }
}

TEST(W4Gpu, DummyWeightsRunOnTheGpu) {
  ASSERT_TRUE(cuda_available()) << "no CUDA GPU: run this test on the device machine (label gpu)";
  ThreadPool pool(2);
  // The tiny config with --quantization X's usual configuration (group 128) and an act-order one.
  const std::vector<std::pair<json, std::string>> cases = {
      {json(nullptr), "gptq"},
      {json(nullptr), "awq"},
      {gptq_config(64, true, false), "gptq"},
  };
  for (const auto& [q, method] : cases) {
    SCOPED_TRACE(q.dump() + " --quantization " + method);
    testing::TempDir dir;
    json c = tiny_llama();
    if (!q.is_null()) c["quantization_config"] = q;
    testing::write_file(dir.path() / "config.json", c.dump());
    LoadOptions options;
    options.format = LoadFormat::kDummy;
    options.dtype = DType::kBF16;
    options.seed = 4;
    options.definition.quantization = method;
    options.definition.dummy_weights = true;
    auto gpu = load_model_on_device(dir.str(), options, "cuda", pool);
    const WeightFormat f = gpu->definition().layers[0].qkv.format;
    EXPECT_TRUE(f == WeightFormat::kGptq || f == WeightFormat::kAwq)
        << gpu->definition().weight_summary();
    golden::SequenceRunner run(*gpu, 40, kBlockSize);
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 20; ++i) prompt.push_back((i * 7 + 3) % 64);
    for (const auto& row : {run.append(prompt).back(), run.append({5}).back()})
      for (float v : row) ASSERT_TRUE(std::isfinite(v));
  }
}

}  // namespace
}  // namespace pagoda
