// Quantized checkpoints through the whole CPU model (model/quant/):
//  - a tiny Llama checkpoint is written in each real format (tensor names, shapes, dtypes and
//    packings as the quantizers write them, by quantizers written here) next to a dense checkpoint
//    of the exactly dequantized weights; weight-only formats give the dense model's logits (up to
//    the order of fp32 sums), W8A8 formats differ by their activation quantization only;
//  - the W8A8 projections against an emulation of vLLM's activation quantization written here;
//  - --load-format dummy --quantization X runs for every format; FP8 online on a float
//    checkpoint; a packed checkpoint without its quantization_config names the cause.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "core/fp8.h"
#include "core/half.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/registry.h"
#include "quant_checkpoint.h"
#include "test_checkpoint.h"

namespace pagoda {
namespace {

using namespace quant_checkpoint;  // NOLINT

/// Every position's logits of one prompt, prefilled in one step.
std::vector<float> prompt_logits(Model& model, int n) {
  model.init_kv_cache(4, 16);
  std::vector<int32_t> ids, pos, rows, table{2, 0, 1, 3};
  std::vector<int64_t> slots;
  for (int i = 0; i < n; ++i) {
    ids.push_back((i * 13 + 5) % 64);
    pos.push_back(i);
    rows.push_back(i);
    slots.push_back(int64_t{table[static_cast<size_t>(i / 16)]} * 16 + i % 16);
  }
  const std::vector<int32_t> qsl{0, n}, lens{n};
  const ForwardBatch batch{ids, pos, qsl, lens, table, 4, slots, rows};
  const std::span<float> logits = model.forward(batch);
  return {logits.begin(), logits.end()};
}

/// The largest |a - b| over the largest |b|.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  EXPECT_GT(scale, 0.1);
  return err / scale;
}

double quant_vs_dense(const json& q, const Quantizer& quantize, const std::string& flag = "") {
  testing::TempDir quant_dir, dense_dir;
  write_pair(q, quantize, quant_dir, dense_dir);
  ThreadPool pool(2);
  LoadOptions opts;
  opts.definition.quantization = flag;
  auto quant = load_model(quant_dir.str(), opts, pool);
  auto dense = load_model(dense_dir.str(), LoadOptions{}, pool);
  EXPECT_TRUE(quant->definition().quantized());
  return relative_error(prompt_logits(*quant, 20), prompt_logits(*dense, 20));
}

json ct(const json& weights, const json& inputs, const std::string& format) {
  json group{{"targets", {"Linear"}}, {"weights", weights}};
  if (!inputs.is_null()) group["input_activations"] = inputs;
  return json{{"config_groups", {{"group_0", group}}},
              {"format", format},
              {"ignore", {"lm_head"}},
              {"quant_method", "compressed-tensors"},
              {"quantization_status", "compressed"}};
}

json args(int bits, const std::string& type, const std::string& strategy, bool dynamic,
          int group = 0) {
  json a{{"num_bits", bits},
         {"type", type},
         {"strategy", strategy},
         {"dynamic", dynamic},
         {"symmetric", true}};
  if (group > 0) a["group_size"] = group;
  return a;
}

json gptq_q(int64_t group, bool desc_act, bool sym) {
  return {{"quant_method", "gptq"}, {"bits", 4},  {"group_size", group},
          {"desc_act", desc_act},   {"sym", sym}, {"checkpoint_format", "gptq"}};
}

TEST(QuantModel, WeightOnlyFormatsGiveTheDequantizedDenseLogits) {
  for (const int64_t group : {32, 64, 128, -1}) {
    for (const bool act_order : {false, true}) {
      for (const bool sym : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << "gptq group " << group << " act-order " << act_order << " sym " << sym);
        EXPECT_LT(quant_vs_dense(gptq_q(group, act_order, sym), gptq(group, act_order, sym)), 1e-5);
      }
    }
  }
  for (const int64_t group : {32, 64, 128}) {
    SCOPED_TRACE(::testing::Message() << "awq group " << group);
    const json q{{"quant_method", "awq"},
                 {"bits", 4},
                 {"group_size", group},
                 {"version", "gemm"},
                 {"zero_point", true}};
    EXPECT_LT(quant_vs_dense(q, awq(group), "awq_marlin"), 1e-5);
  }
  EXPECT_LT(quant_vs_dense(ct(args(8, "float", "channel", false), nullptr, "float-quantized"),
                           eight_bit(true, false)),
            1e-5);
  EXPECT_LT(quant_vs_dense(
                ct(args(4, "float", "tensor_group", false, 16), nullptr, "nvfp4-pack-quantized"),
                fp4("nv")),
            1e-5);
  EXPECT_LT(
      quant_vs_dense(ct(args(4, "float", "group", false, 32), nullptr, "mxfp4-pack-quantized"),
                     fp4("mx")),
      1e-5);
  EXPECT_LT(quant_vs_dense(json{{"quant_method", "modelopt"},
                                {"quant_algo", "NVFP4"},
                                {"group_size", 16},
                                {"ignore", {"lm_head"}}},
                           fp4("modelopt")),
            1e-5);
}

TEST(QuantModel, W8A8FormatsDifferByTheirActivationQuantizationOnly) {
  // FP8 activations keep 3 mantissa bits (relative error up to 1/16 per element, random signs),
  // INT8 per-token ones 1/254 of the row's largest value.
  const double fp8_dyn = quant_vs_dense(
      ct(args(8, "float", "channel", false), args(8, "float", "token", true), "float-quantized"),
      eight_bit(true, false));
  const double fp8_static = quant_vs_dense(
      ct(args(8, "float", "tensor", false), args(8, "float", "tensor", false), "float-quantized"),
      eight_bit(true, true, 0.05f));
  const double int8 = quant_vs_dense(
      ct(args(8, "int", "channel", false), args(8, "int", "token", true), "int-quantized"),
      eight_bit(false, false));
  const double int8_static = quant_vs_dense(
      ct(args(8, "int", "tensor", false), args(8, "int", "tensor", false), "int-quantized"),
      eight_bit(false, true, 0.1f));
  // Sanity bounds, about twice what these random weights give (the exact check of the
  // activation quantization is the next test): FP8 per token 0.080, FP8 static (scale 0.05)
  // 0.100, INT8 per token 0.028, INT8 static (scale 0.1: a coarse grid) 0.178.
  const std::pair<double, double> bounds[] = {
      {fp8_dyn, 0.16}, {fp8_static, 0.2}, {int8, 0.06}, {int8_static, 0.36}};
  for (const auto& [e, bound] : bounds) {
    EXPECT_GT(e, 1e-6);  // the activations were quantized
    EXPECT_LT(e, bound);
  }
}

/// One W8A8 projection (Llama's qkv: three sources, each with its own scales) against the
/// emulation of vLLM's kernels written here: quantize x per token, multiply the codes exactly,
/// scale.
TEST(QuantModel, W8A8ProjectionsEmulateVllmActivationQuantization) {
  testing::TempDir dir, dense_dir;
  for (const bool fp8 : {true, false}) {
    const json q =
        fp8 ? ct(args(8, "float", "channel", false), args(8, "float", "token", true),
                 "float-quantized")
            : ct(args(8, "int", "channel", false), args(8, "int", "token", true), "int-quantized");
    write_pair(q, eight_bit(fp8, false), dir, dense_dir);
    const ModelConfig config = load_model_config(dir.str());
    const ModelDefinition d = define_model(config);
    const WeightStore weights = WeightStore::open_directory(dir.str());
    const WeightStore dense_weights = WeightStore::open_directory(dense_dir.str());
    const LinearDef& qkv = d.layers[1].qkv;
    auto linear = linear_method(qkv.format).bind_cpu(qkv, weights);
    const int64_t m = 3, in = qkv.in, out = qkv.out();
    std::vector<float> x(static_cast<size_t>(m * in)), y(static_cast<size_t>(m * out));
    uint64_t seed = 9;
    for (float& v : x) v = 2.0f * noise(seed);
    ThreadPool pool(2);
    const OpContext ctx{&pool};
    linear->apply(ctx, Tensor{x.data(), DType::kF32, Shape{m, in}},
                  Tensor{y.data(), DType::kF32, Shape{m, out}});
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = &x[static_cast<size_t>(i * in)];
      const float amax = amax_of(xi, in);
      std::vector<double> xq(static_cast<size_t>(in));
      for (int64_t l = 0; l < in; ++l) {
        if (fp8) {
          const float s = amax / kE4M3Max;
          xq[static_cast<size_t>(l)] = e4m3_to_float(float_to_e4m3(xi[l] / s)) * s;
        } else {
          xq[static_cast<size_t>(l)] = std::nearbyint(xi[l] * (127.0f / amax)) * (amax / 127.0f);
        }
      }
      for (const LinearDef::Source& s : qkv.sources) {
        const std::vector<float> w = [&] {
          const Tensor& t = dense_weights.get(s.prefix + ".weight");
          return std::vector<float>(t.as<float>(), t.as<float>() + t.num_elements());
        }();
        for (int64_t j = 0; j < qkv.source_rows(s); ++j) {
          double want = 0;
          for (int64_t l = 0; l < in; ++l)
            want += xq[static_cast<size_t>(l)] * w[static_cast<size_t>(j * in + l)];
          const float got = y[static_cast<size_t>(i * out + qkv.source_offset(s) + j)];
          ASSERT_NEAR(got, want, 1e-5 * std::max(1.0, std::abs(want)))
              << (fp8 ? "fp8 " : "int8 ") << s.prefix << " row " << j;
        }
      }
    }
  }
}

TEST(QuantModel, DummyWeightsInEveryFormat) {
  const std::vector<std::pair<json, std::string>> cases = {
      {ct(args(8, "float", "channel", false), args(8, "float", "token", true), "float-quantized"),
       ""},
      {ct(args(8, "float", "tensor", false), args(8, "float", "tensor", false), "float-quantized"),
       ""},
      {ct(args(8, "int", "channel", false), args(8, "int", "token", true), "int-quantized"), ""},
      {gptq_q(128, true, true), "gptq"},
      {gptq_q(-1, false, false), ""},
      {json{{"quant_method", "awq"}, {"bits", 4}, {"group_size", 64}, {"version", "gemm"}}, "awq"},
      {json{{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}}, "fp8"},
      {ct(args(4, "float", "tensor_group", false, 16), nullptr, "nvfp4-pack-quantized"), ""},
      {ct(args(4, "float", "group", false, 32), nullptr, "mxfp4-pack-quantized"), ""},
      {json{{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}}, "modelopt_fp4"},
      {json{{"quant_method", "modelopt"}, {"quant_algo", "FP8"}}, ""},
      {json(nullptr), "fp8"},  // FP8 online over dense dummy weights
      // A float config with --quantization X: X's usual configuration (default_quant_config).
      {json(nullptr), "gptq"},
      {json(nullptr), "awq_marlin"},
      {json(nullptr), "compressed-tensors"},
      {json(nullptr), "modelopt"},
      {json(nullptr), "modelopt_fp4"},
  };
  for (const auto& [q, flag] : cases) {
    SCOPED_TRACE(q.dump() + " --quantization " + flag);
    testing::TempDir dir;
    json c = tiny_llama();
    if (!q.is_null()) c["quantization_config"] = q;
    testing::write_file(dir.path() / "config.json", c.dump());
    ThreadPool pool(2);
    LoadOptions opts;
    opts.format = LoadFormat::kDummy;
    opts.definition.quantization = flag;
    opts.definition.dummy_weights = true;
    auto model = load_model(dir.str(), opts, pool);
    EXPECT_TRUE(model->definition().quantized());
    const std::vector<float> logits = prompt_logits(*model, 5);
    double spread = 0;
    for (float v : logits) {
      ASSERT_TRUE(std::isfinite(v));
      spread = std::max(spread, static_cast<double>(std::abs(v - logits[0])));
    }
    EXPECT_GT(spread, 1e-4);
  }
}

TEST(QuantModel, Fp8OnlineQuantizesAFloatCheckpointPerChannel) {
  // The same float weights loaded dense and with --quantization fp8: W8A8 with per-channel
  // weights and per-token activations, close to the dense logits.
  testing::TempDir unused, dir;  // only the dense checkpoint (`dir`) is used
  write_pair(ct(args(8, "float", "channel", false), nullptr, "float-quantized"),
             eight_bit(true, false), unused, dir);
  ThreadPool pool(2);
  LoadOptions fp8;
  fp8.definition.quantization = "fp8";
  auto online = load_model(dir.str(), fp8, pool);
  auto dense = load_model(dir.str(), LoadOptions{}, pool);
  EXPECT_EQ(online->definition().layers[0].qkv.format, WeightFormat::kFp8Online);
  const double e = relative_error(prompt_logits(*online, 20), prompt_logits(*dense, 20));
  EXPECT_GT(e, 1e-6);
  EXPECT_LT(e, 0.16);  // as FP8 per token above
}

TEST(QuantModel, PackedTensorsWithoutTheirConfigNameTheCause) {
  testing::TempDir quant_dir, dense_dir;
  write_pair(gptq_q(64, false, true), gptq(64, false, true), quant_dir, dense_dir);
  testing::write_file(quant_dir.path() / "config.json", tiny_llama().dump());  // config dropped
  ThreadPool pool(1);
  try {
    (void)load_model(quant_dir.str(), LoadOptions{}, pool);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("GPTQ/AWQ-packed tensors ('qweight', 'qzeros', 'scales')"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("pass --quantization"), std::string::npos) << what;
    EXPECT_EQ(what.find("is missing"), std::string::npos) << what;
  }
  // The right flag without the config is refused by name too (the method's fields are unknown).
  LoadOptions gptq_flag;
  gptq_flag.definition.quantization = "gptq";
  EXPECT_THROW((void)load_model(quant_dir.str(), gptq_flag, pool), InvalidArgument);
}

}  // namespace
}  // namespace pagoda
