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
#include "test_checkpoint.h"

namespace pagoda {
namespace {

using nlohmann::json;
using testing::RawTensor;
using Raw = std::map<std::string, RawTensor>;

json tiny_llama() {
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"vocab_size", 64},
              {"hidden_size", 128},
              {"intermediate_size", 256},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-6},
              {"tie_word_embeddings", false}};
}

template <typename T>
RawTensor raw(const std::string& dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
  return {dtype, std::move(shape),
          std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T))};
}

/// fp16 values and their bits (scales of GPTQ/AWQ are fp16 in the checkpoints).
float round_f16(float v) { return f16_to_float(float_to_f16(v)); }
std::vector<uint16_t> f16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float x : v) out.push_back(float_to_f16(x));
  return out;
}

int32_t pack_word(const std::function<uint32_t(int)>& value, int bits) {
  uint32_t word = 0;
  for (int t = 0; t < 32 / bits; ++t) word |= value(t) << (bits * t);
  return static_cast<int32_t>(word);
}

float amax_of(const float* w, int64_t n) {
  float a = 0;
  for (int64_t i = 0; i < n; ++i) a = std::max(a, std::abs(w[i]));
  return a;
}

/// Quantizes one source's W [rows, in] into the checkpoint tensors of `format`, returning the
/// exactly dequantized W (what the dense reference checkpoint holds).
using Quantizer = std::function<std::vector<float>(
    const std::string& prefix, const std::vector<float>& w, int64_t rows, int64_t in, Raw& out)>;

/// W8: per output row (or per tensor) scale = amax / qmax; FP8 or INT8 codes.
Quantizer eight_bit(bool fp8, bool per_tensor, float input_scale = 0) {
  return
      [=](const std::string& p, const std::vector<float>& w, int64_t rows, int64_t in, Raw& out) {
        const float qmax = fp8 ? kE4M3Max : 127.0f;
        std::vector<float> deq(w.size()), scales;
        std::vector<uint8_t> codes(w.size());
        const float tensor_scale = amax_of(w.data(), rows * in) / qmax;
        for (int64_t r = 0; r < rows; ++r) {
          const float s =
              per_tensor ? tensor_scale : amax_of(&w[static_cast<size_t>(r * in)], in) / qmax;
          scales.push_back(s);
          for (int64_t l = 0; l < in; ++l) {
            const auto i = static_cast<size_t>(r * in + l);
            if (fp8) {
              codes[i] = float_to_e4m3(w[i] / s);
              deq[i] = e4m3_to_float(codes[i]) * s;
            } else {
              const float q = std::clamp(std::nearbyint(w[i] / s), -127.0f, 127.0f);
              codes[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
              deq[i] = q * s;
            }
          }
        }
        out[p + ".weight"] = raw(fp8 ? "F8_E4M3" : "I8", {rows, in}, codes);
        if (per_tensor) {
          out[p + ".weight_scale"] = raw("F32", {1}, std::vector<float>{tensor_scale});
        } else {
          out[p + ".weight_scale"] = raw("F32", {rows, 1}, scales);
        }
        if (input_scale > 0)
          out[p + ".input_scale"] = raw("F32", {1}, std::vector<float>{input_scale});
        return deq;
      };
}

/// GPTQ 4-bit, AutoGPTQ's v1 layout (zero - 1 stored); act-order draws a random permutation of
/// the input features and groups them in that order.
Quantizer gptq(int64_t group, bool act_order, bool sym) {
  return [=](const std::string& p, const std::vector<float>& w, int64_t rows, int64_t in,
             Raw& out) {
    const int64_t g_size = group == -1 ? in : group, groups = in / g_size;
    std::vector<int32_t> g_idx(static_cast<size_t>(in));
    std::vector<int64_t> perm(static_cast<size_t>(in));
    for (int64_t l = 0; l < in; ++l) perm[static_cast<size_t>(l)] = l;
    if (act_order) std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
    for (int64_t i = 0; i < in; ++i)
      g_idx[static_cast<size_t>(perm[static_cast<size_t>(i)])] = static_cast<int32_t>(i / g_size);
    std::vector<float> scale(static_cast<size_t>(groups * rows));
    std::vector<int32_t> zero(static_cast<size_t>(groups * rows));
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t r = 0; r < rows; ++r) {
        float lo = 0, hi = 0;
        for (int64_t l = 0; l < in; ++l)
          if (g_idx[static_cast<size_t>(l)] == g) {
            lo = std::min(lo, w[static_cast<size_t>(r * in + l)]);
            hi = std::max(hi, w[static_cast<size_t>(r * in + l)]);
          }
        const auto gr = static_cast<size_t>(g * rows + r);
        if (sym) {
          scale[gr] = round_f16(std::max(hi, -lo) * 2 / 15);
          zero[gr] = 8;
        } else {
          scale[gr] = round_f16((hi - lo) / 15);
          zero[gr] = std::clamp(static_cast<int32_t>(std::nearbyint(-lo / scale[gr])), 1, 15);
        }
      }
    std::vector<int32_t> q(w.size());
    std::vector<float> deq(w.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t l = 0; l < in; ++l) {
        const auto i = static_cast<size_t>(r * in + l);
        const auto gr = static_cast<size_t>(g_idx[static_cast<size_t>(l)] * rows + r);
        q[i] = std::clamp(static_cast<int32_t>(std::nearbyint(w[i] / scale[gr])) + zero[gr], 0, 15);
        deq[i] = scale[gr] * static_cast<float>(q[i] - zero[gr]);
      }
    std::vector<int32_t> qweight, qzeros;
    for (int64_t i = 0; i < in / 8; ++i)  // [in / 8, rows]: packed along in
      for (int64_t r = 0; r < rows; ++r)
        qweight.push_back(pack_word(
            [&](int t) {
              return static_cast<uint32_t>(q[static_cast<size_t>(r * in + i * 8 + t)]);
            },
            4));
    for (int64_t g = 0; g < groups; ++g)  // [groups, rows / 8]: packed along rows, zero - 1
      for (int64_t c = 0; c < rows / 8; ++c)
        qzeros.push_back(pack_word(
            [&](int t) {
              return static_cast<uint32_t>(zero[static_cast<size_t>(g * rows + c * 8 + t)] - 1);
            },
            4));
    out[p + ".qweight"] = raw("I32", {in / 8, rows}, qweight);
    out[p + ".qzeros"] = raw("I32", {groups, rows / 8}, qzeros);
    out[p + ".scales"] = raw("F16", {groups, rows}, f16_bits(scale));
    out[p + ".g_idx"] = raw("I32", {in}, g_idx);
    return deq;
  };
}

/// AWQ GEMM: asymmetric per (group, row), W^T packed along rows in AWQ's nibble order.
Quantizer awq(int64_t group) {
  return [=](const std::string& p, const std::vector<float>& w, int64_t rows, int64_t in,
             Raw& out) {
    const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    const int64_t groups = in / group;
    std::vector<float> scale(static_cast<size_t>(groups * rows));
    std::vector<int32_t> zero(scale.size()), q(w.size());
    std::vector<float> deq(w.size());
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t r = 0; r < rows; ++r) {
        float lo = 0, hi = 0;
        for (int64_t l = g * group; l < (g + 1) * group; ++l) {
          lo = std::min(lo, w[static_cast<size_t>(r * in + l)]);
          hi = std::max(hi, w[static_cast<size_t>(r * in + l)]);
        }
        const auto gr = static_cast<size_t>(g * rows + r);
        scale[gr] = round_f16((hi - lo) / 15);
        zero[gr] = std::clamp(static_cast<int32_t>(std::nearbyint(-lo / scale[gr])), 0, 15);
        for (int64_t l = g * group; l < (g + 1) * group; ++l) {
          const auto i = static_cast<size_t>(r * in + l);
          q[i] =
              std::clamp(static_cast<int32_t>(std::nearbyint(w[i] / scale[gr])) + zero[gr], 0, 15);
          deq[i] = static_cast<float>(q[i] - zero[gr]) * scale[gr];
        }
      }
    std::vector<int32_t> qweight, qzeros;
    for (int64_t l = 0; l < in; ++l)
      for (int64_t c = 0; c < rows / 8; ++c)
        qweight.push_back(pack_word(
            [&](int t) {
              return static_cast<uint32_t>(q[static_cast<size_t>((c * 8 + order[t]) * in + l)]);
            },
            4));
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t c = 0; c < rows / 8; ++c)
        qzeros.push_back(pack_word(
            [&](int t) {
              return static_cast<uint32_t>(zero[static_cast<size_t>(g * rows + c * 8 + order[t])]);
            },
            4));
    out[p + ".qweight"] = raw("I32", {in, rows / 8}, qweight);
    out[p + ".qzeros"] = raw("I32", {groups, rows / 8}, qzeros);
    out[p + ".scales"] = raw("F16", {groups, rows}, f16_bits(scale));
    return deq;
  };
}

/// FP4: NVFP4 (compressed-tensors or ModelOpt names) or MXFP4; pairs of codes per byte, the even
/// input feature in the low nibble.
Quantizer fp4(const std::string& kind) {
  return [=](const std::string& p, const std::vector<float>& w, int64_t rows, int64_t in,
             Raw& out) {
    const bool mx = kind == "mx";
    const int64_t block = mx ? 32 : 16;
    const float global = kE4M3Max * kE2M1Max / amax_of(w.data(), rows * in);  // NVFP4
    std::vector<uint8_t> packed(static_cast<size_t>(rows * in / 2), 0), scale_codes;
    std::vector<float> deq(w.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < in / block; ++b) {
        const float* wb = &w[static_cast<size_t>(r * in + b * block)];
        const float amax = amax_of(wb, block);
        float s = 0;
        if (mx) {
          const int e = amax > 0 ? static_cast<int>(std::ceil(std::log2(amax / kE2M1Max))) : -127;
          scale_codes.push_back(static_cast<uint8_t>(e + 127));
          s = e8m0_to_float(scale_codes.back());
        } else {
          scale_codes.push_back(float_to_e4m3(amax / kE2M1Max * global));
          s = e4m3_to_float(scale_codes.back()) / global;
        }
        for (int64_t l = 0; l < block; ++l) {
          const int64_t col = b * block + l;
          const uint8_t code = s > 0 ? float_to_e2m1(wb[l] / s) : 0;
          packed[static_cast<size_t>(r * in / 2 + col / 2)] |=
              static_cast<uint8_t>(col % 2 == 0 ? code : code << 4);
          deq[static_cast<size_t>(r * in + col)] = e2m1_to_float(code) * s;
        }
      }
    const std::vector<int64_t> scale_shape{rows, in / block};
    if (kind == "modelopt") {
      out[p + ".weight"] = raw("U8", {rows, in / 2}, packed);
      out[p + ".weight_scale"] = raw("F8_E4M3", scale_shape, scale_codes);
      out[p + ".weight_scale_2"] = raw("F32", {}, std::vector<float>{1.0f / global});
      out[p + ".input_scale"] = raw("F32", {}, std::vector<float>{0.01f});
    } else {
      out[p + ".weight_packed"] = raw("U8", {rows, in / 2}, packed);
      out[p + ".weight_scale"] = raw(mx ? "U8" : "F8_E4M3", scale_shape, scale_codes);
      if (!mx) out[p + ".weight_global_scale"] = raw("F32", {1}, std::vector<float>{global});
    }
    return deq;
  };
}

float noise(uint64_t& state) {
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  return static_cast<float>(static_cast<double>(state >> 11) / 4503599627370496.0 - 1.0);
}

/// Writes `quant_dir` (config with `q`, tensors quantized by `quantize`) and `dense_dir` (no
/// quantization_config, the dequantized weights in F32) from the same random weights.
void write_pair(const json& q, const Quantizer& quantize, const testing::TempDir& quant_dir,
                const testing::TempDir& dense_dir) {
  const json dense_config = tiny_llama();
  json quant_config = dense_config;
  quant_config["quantization_config"] = q;
  testing::write_file(quant_dir.path() / "config.json", quant_config.dump());
  testing::write_file(dense_dir.path() / "config.json", dense_config.dump());
  const ModelDefinition quant = define_model(load_model_config(quant_dir.str()));
  const ModelDefinition dense = define_model(load_model_config(dense_dir.str()));
  std::map<std::string, const LinearDef*> format_of;  // source prefix -> its projection
  auto note = [&](const LinearDef& l) {
    for (const LinearDef::Source& s : l.sources) format_of[s.prefix] = &l;
  };
  for (const LayerDef& l : quant.layers)
    for (const LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) note(*lin);
  note(quant.lm_head);
  Raw quant_raw, dense_raw;
  uint64_t seed = 3;
  for (const TensorSpec& t : dense.tensors()) {
    std::vector<float> v(static_cast<size_t>(t.shape.num_elements()));
    const bool norm = t.shape.rank() == 1;
    for (float& x : v) x = norm ? 1.0f + 0.2f * noise(seed) : 0.15f * noise(seed);
    std::vector<int64_t> shape;
    for (int i = 0; i < t.shape.rank(); ++i) shape.push_back(t.shape[i]);
    const std::string prefix = t.name.substr(0, t.name.rfind('.'));
    const auto it = format_of.find(prefix);
    if (t.shape.rank() == 2 && it != format_of.end() &&
        it->second->format != WeightFormat::kDense) {
      v = quantize(prefix, v, shape[0], shape[1], quant_raw);
    } else {
      quant_raw[t.name] = raw("F32", shape, v);
    }
    dense_raw[t.name] = raw("F32", shape, v);
  }
  testing::write_file(quant_dir.path() / "model.safetensors",
                      testing::safetensors_bytes(quant_raw));
  testing::write_file(dense_dir.path() / "model.safetensors",
                      testing::safetensors_bytes(dense_raw));
}

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
