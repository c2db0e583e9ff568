// FP8 (and INT8 W8A8, at the end) weights on the GPU against the CPU's path (label gpu, the
// device machine). FP8: on the
// bf16 tiny checkpoints quantized at load (--quantization fp8: both backends quantize the same
// bf16 values per row, so their e4m3 codes and scales are identical) and on dummy
// compressed-tensors FP8_DYNAMIC weights (the same codes and scales drawn on both sides).
//
// What may differ, and the tolerance: the GPU's activations are bf16 (the CPU's fp32), and its
// small steps (m <= 8: decode, short prompts) run the weight-only FP8 GEMV where the CPU
// quantizes the activations per token (W8A8) at every m; larger steps quantize them on both
// sides. So the comparison is vLLM's check_logprobs_close between the two backends, as the bf16
// GPU golden tests use against transformers: greedy tokens equal until the first divergence,
// where each side's token is in the other's top-5, and log-probabilities within 0.5 (the bf16
// GPU golden bound) over the CPU's top-10 at every prompt position and top-5 at every step.
//
// The bf16 tiny checkpoints (initializer_range 0.15) are ill-conditioned for that bound: on the CPU
// alone, W8A16 vs W8A8 moves mistral-hd128-bf16's top-10 log-probabilities by 1.5-2.6, and merely
// rounding the W8A8 inputs to bf16 before their e4m3 quantization by 1.2-1.4 (llama-bf16: 0.6 on
// 40 tokens), since a changed e4m3 rounding is a full FP8 step. So on those fixtures the bound is
// the larger of 0.5 and 1.5 x the CPU's own W8A16-vs-W8A8 distance on the same prompt; the dummy
// FP8-at-load case (well-conditioned weights, as DummyCompressedTensorsMatchesCpu) keeps 0.5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "golden_check.h"
#include "model/config.h"
#include "model/cpu_decoder.h"
#include "model/loader/safetensors.h"
#include "model/model.h"
#include "model/registry.h"
#include "ops/op_context.h"
#include "runtime/device_model.h"
#include "sampling/sampler.h"

namespace pagoda {
namespace {

constexpr double kLogprobTolerance = 0.5;
constexpr int kBlockSize = 16;
constexpr size_t kDecodeSteps = 16;

/// The ids of v's k largest entries.
std::vector<int32_t> top_ids(const std::vector<float>& v, size_t k) {
  std::vector<int32_t> ids;
  for (const TokenLogprob& t : top_k_entries(v, static_cast<int>(k))) ids.push_back(t.token);
  return ids;
}

/// max |gpu[id] - cpu[id]| over cpu's top-k ids.
double top_error(const std::vector<float>& cpu, const std::vector<float>& gpu, size_t k) {
  double err = 0;
  for (int32_t id : top_ids(cpu, k)) {
    const auto i = static_cast<size_t>(id);
    err = std::max(err, std::abs(static_cast<double>(gpu[i]) - cpu[i]));
  }
  return err;
}

bool contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

/// max over the prompt of top_error(a's, b's log-probabilities, 10).
double prefill_distance(Model& a, Model& b, const std::vector<int32_t>& prompt) {
  const int64_t max_len = static_cast<int64_t>(prompt.size()) + 1;
  golden::SequenceRunner ra(a, max_len, kBlockSize), rb(b, max_len, kBlockSize);
  const auto la = ra.append(prompt), lb = rb.append(prompt);
  double err = 0;
  for (size_t i = 0; i < prompt.size(); ++i) err = std::max(err, top_error(la[i], lb[i], 10));
  return err;
}

/// The CPU model of `dir` with FP8 at load but weight-only (W8A16, as the GPU's small steps).
std::unique_ptr<Model> cpu_weight_only(const std::string& dir, const LoadOptions& options,
                                       ThreadPool& pool) {
  const ModelConfig config = load_model_config(dir);
  ModelDefinition d = define_model(config, options.definition);
  for (LayerDef& l : d.layers)
    for (LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down})
      lin->quant.activations = ActivationQuant::kNone;
  return build_cpu_model(config, std::move(d), WeightStore::open_directory(dir), OpContext{&pool});
}

/// Runs `prompt` and kDecodeSteps greedy steps on both models under the rule at the top.
void compare(Model& cpu, Model& gpu, const std::vector<int32_t>& prompt,
             double tolerance = kLogprobTolerance) {
  const int64_t max_len = static_cast<int64_t>(prompt.size() + kDecodeSteps) + 1;
  golden::SequenceRunner on_cpu(cpu, max_len, kBlockSize), on_gpu(gpu, max_len, kBlockSize);
  const auto prefill_cpu = on_cpu.append(prompt);
  const auto prefill_gpu = on_gpu.append(prompt);
  double err = 0;
  for (size_t i = 0; i < prompt.size(); ++i)
    err = std::max(err, top_error(prefill_cpu[i], prefill_gpu[i], 10));
  EXPECT_LE(err, tolerance) << "prefill of " << prompt.size() << " tokens";
  std::vector<float> last_cpu = prefill_cpu.back(), last_gpu = prefill_gpu.back();
  for (size_t step = 0; step < kDecodeSteps; ++step) {
    const int32_t tc = golden::argmax(last_cpu), tg = golden::argmax(last_gpu);
    if (tc != tg) {
      EXPECT_TRUE(contains(top_ids(last_cpu, 5), tg)) << "step " << step << ": GPU token " << tg;
      EXPECT_TRUE(contains(top_ids(last_gpu, 5), tc)) << "step " << step << ": CPU token " << tc;
      return;
    }
    EXPECT_LE(top_error(last_cpu, last_gpu, 5), tolerance) << "step " << step;
    last_cpu = on_cpu.append({tc}).back();
    last_gpu = on_gpu.append({tg}).back();
  }
}

// --quantization fp8 on the bf16 fixtures: the plain Llama block (fused decode GEMVs with RoPE),
// head dim 128 (fast attention), and Gemma-2's block (unfused) where generated.
TEST(Fp8Gpu, QuantizedAtLoadMatchesCpu) {
  ASSERT_TRUE(cuda_available()) << "no CUDA GPU: run this test on the device machine (label gpu)";
  ThreadPool pool(2);
  int checked = 0;
  for (const char* name : {"llama-bf16", "mistral-hd128-bf16", "gemma2-hd256-bf16"}) {
    const std::string dir = golden::kSource + "/tests/data/tiny/" + name;
    if (!std::filesystem::exists(dir)) continue;
    SCOPED_TRACE(name);
    LoadOptions options = golden::fixture_load_options(dir);
    options.definition.quantization = "fp8";
    auto cpu = load_model_on_device(dir, options, "cpu", pool);
    auto gpu = load_model_on_device(dir, options, "cuda", pool);
    auto cpu_w8a16 = cpu_weight_only(dir, options, pool);
    const golden::json golden = golden::json::parse(read_text_file(dir + "/golden.json"));
    for (const golden::json& c : golden.at("cases")) {
      const auto prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
      // The same prompt repeated past 8 tokens: the W8A8 GEMM (cuBLASLt) on the GPU.
      std::vector<int32_t> longer;
      while (longer.size() < 40) longer.insert(longer.end(), prompt.begin(), prompt.end());
      for (const auto& p : {prompt, longer}) {
        SCOPED_TRACE("prompt of " + std::to_string(p.size()) + " tokens");
        const double tolerance =
            std::max(kLogprobTolerance, 1.5 * prefill_distance(*cpu, *cpu_w8a16, p));
        compare(*cpu, *gpu, p, tolerance);
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

// --quantization fp8 over dummy bf16 weights (+-0.035, well-conditioned): the GPU quantizes them
// on the device (cuda::quantize_fp8_rows), the CPU on the host; the tight bound.
TEST(Fp8Gpu, DummyQuantizedAtLoadMatchesCpu) {
  ASSERT_TRUE(cuda_available()) << "no CUDA GPU: run this test on the device machine (label gpu)";
  ThreadPool pool(2);
  for (const char* name : {"llama-bf16", "mistral-hd128-bf16"}) {
    SCOPED_TRACE(name);
    const std::string dir = golden::kSource + "/tests/data/tiny/" + name;
    LoadOptions options;
    options.format = LoadFormat::kDummy;
    options.dtype = DType::kBF16;
    options.seed = 5;
    options.definition.quantization = "fp8";
    options.definition.dummy_weights = true;
    auto cpu = load_model_on_device(dir, options, "cpu", pool);
    auto gpu = load_model_on_device(dir, options, "cuda", pool);
    EXPECT_EQ(cpu->definition().layers[0].qkv.format, WeightFormat::kFp8Online);
    compare(*cpu, *gpu, {1, 5, 9, 13, 17, 21, 25});
    std::vector<int32_t> longer;
    for (int32_t i = 0; i < 42; ++i) longer.push_back((i * 7 + 3) % 100);
    compare(*cpu, *gpu, longer);
  }
}

// Dummy compressed-tensors FP8_DYNAMIC weights (serialized e4m3 codes + per-channel scales) on a
// tiny config: the upload path of checkpoint-quantized FP8.
TEST(Fp8Gpu, DummyCompressedTensorsMatchesCpu) {
  ASSERT_TRUE(cuda_available()) << "no CUDA GPU: run this test on the device machine (label gpu)";
  ThreadPool pool(2);
  const std::string dir = golden::kSource + "/tests/data/tiny/llama-bf16";
  LoadOptions options;
  options.format = LoadFormat::kDummy;
  options.dtype = DType::kBF16;
  options.seed = 3;
  options.definition.quantization = "compressed-tensors";
  options.definition.dummy_weights = true;
  auto cpu = load_model_on_device(dir, options, "cpu", pool);
  auto gpu = load_model_on_device(dir, options, "cuda", pool);
  EXPECT_NE(cpu->definition().weight_summary().find("fp8"), std::string::npos)
      << cpu->definition().weight_summary();
  compare(*cpu, *gpu, {1, 5, 9, 13, 17, 21});
  std::vector<int32_t> longer;
  for (int32_t i = 0; i < 40; ++i) longer.push_back((i * 7 + 3) % 100);
  compare(*cpu, *gpu, longer);
}

// Dummy INT8 W8A8 weights (compressed-tensors int-quantized: int8 codes + per-channel scales,
// dynamic per-token int8 activations) in the tiny ct-int8-dynamic fixture's config: the same codes
// and scales drawn on both sides, activations quantized at every m on both (the GPU's decode steps
// run the fused dp4a GEMV, prompts past 8 tokens cuBLASLt's int8 GEMM). Dummy weights are
// well-conditioned (+-0.035), so the 0.5 bound.
TEST(Int8Gpu, DummyMatchesCpu) {
  ASSERT_TRUE(cuda_available()) << "no CUDA GPU: run this test on the device machine (label gpu)";
  ThreadPool pool(2);
  const std::string dir = golden::kSource + "/tests/data/tiny-quant/ct-int8-dynamic";
  LoadOptions options;
  options.format = LoadFormat::kDummy;
  options.dtype = DType::kBF16;
  options.seed = 11;
  options.definition.dummy_weights = true;
  auto cpu = load_model_on_device(dir, options, "cpu", pool);
  auto gpu = load_model_on_device(dir, options, "cuda", pool);
  EXPECT_EQ(cpu->definition().layers[0].qkv.format, WeightFormat::kInt8);
  compare(*cpu, *gpu, {1, 5, 9, 13, 17, 21});
  std::vector<int32_t> longer;
  for (int32_t i = 0; i < 40; ++i) longer.push_back((i * 7 + 3) % 100);
  compare(*cpu, *gpu, longer);
}

}  // namespace
}  // namespace pagoda
