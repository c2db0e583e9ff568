#pragma once
// Tiny quantized checkpoints written by quantizers written here (tensor names, shapes, dtypes and
// packings as AutoGPTQ, AutoAWQ, llm-compressor and ModelOpt write them), each next to a dense
// checkpoint of its exactly dequantized weights: quant_model_test.cc (the CPU) and
// tests/golden/w4_gpu_test.cc (the GPU) read them.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "core/fp8.h"
#include "core/half.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/registry.h"
#include "test_checkpoint.h"

namespace pagoda::quant_checkpoint {

using nlohmann::json;
using testing::RawTensor;
using Raw = std::map<std::string, RawTensor>;

inline json tiny_llama() {
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
inline float round_f16(float v) { return f16_to_float(float_to_f16(v)); }
inline std::vector<uint16_t> f16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float x : v) out.push_back(float_to_f16(x));
  return out;
}

inline int32_t pack_word(const std::function<uint32_t(int)>& value, int bits) {
  uint32_t word = 0;
  for (int t = 0; t < 32 / bits; ++t) word |= value(t) << (bits * t);
  return static_cast<int32_t>(word);
}

inline float amax_of(const float* w, int64_t n) {
  float a = 0;
  for (int64_t i = 0; i < n; ++i) a = std::max(a, std::abs(w[i]));
  return a;
}

/// Quantizes one source's W [rows, in] into the checkpoint tensors of `format`, returning the
/// exactly dequantized W (what the dense reference checkpoint holds).
using Quantizer = std::function<std::vector<float>(
    const std::string& prefix, const std::vector<float>& w, int64_t rows, int64_t in, Raw& out)>;

/// W8: per output row (or per tensor) scale = amax / qmax; FP8 or INT8 codes.
inline Quantizer eight_bit(bool fp8, bool per_tensor, float input_scale = 0) {
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
inline Quantizer gptq(int64_t group, bool act_order, bool sym) {
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
inline Quantizer awq(int64_t group) {
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
inline Quantizer fp4(const std::string& kind) {
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

inline float noise(uint64_t& state) {
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  return static_cast<float>(static_cast<double>(state >> 11) / 4503599627370496.0 - 1.0);
}

/// Writes `quant_dir` (config with `q`, tensors quantized by `quantize`) and `dense_dir` (no
/// quantization_config, the dequantized weights in F32) from the same random weights.
inline void write_pair(const json& q, const Quantizer& quantize, const testing::TempDir& quant_dir,
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

}  // namespace pagoda::quant_checkpoint
