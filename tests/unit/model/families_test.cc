// The Phi-3 and Gemma-2 families (model/arch/phi3.cc, gemma2.cc) and the RoPE scalings through a
// whole model, without transformers:
//  - the definitions of real-shaped configs (tests/data/configs, hand-written): weight tables
//    (names, shapes, fused sources), norms, scales, soft-caps, windows, RoPE tables;
//  - tiny hand-written checkpoints run on the CPU backend against a plain double-precision
//    reference of the decoder written here from the definition's block diagram (definition.h),
//    prefill and then token by token through the paged cache;
//  - a Phi-3 checkpoint (fused qkv_proj, gate_up_proj) gives the logits of the same weights split
//    into a Llama checkpoint, bit for bit;
//  - load errors that name the config field.
// The goldens against transformers are tests/golden (Phi3/Gemma2/YaRN fixtures).
#include <cmath>
#include <map>
#include <numbers>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/model.h"
#include "model/registry.h"
#include "test_checkpoint.h"

namespace pagoda {
namespace {

using nlohmann::json;
using Weights = std::map<std::string, std::vector<float>>;

const std::string kConfigs = std::string(PAGODA_SOURCE_DIR) + "/tests/data/configs/";

ModelConfig real_config(const std::string& name) {
  const std::string path = kConfigs + name + "/config.json";
  return parse_model_config(read_text_file(path), path);
}

std::map<std::string, Shape> table(const ModelDefinition& d) {
  std::map<std::string, Shape> out;
  for (const TensorSpec& t : d.tensors()) out.emplace(t.name, t.shape);
  return out;
}

TEST(Families, Phi3WeightTableHasTheFusedTensors) {
  for (const char* name : {"phi-3-mini-4k-instruct", "phi-3-mini-128k-instruct"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = real_config(name);
    const ModelDefinition d = define_model(c);
    EXPECT_EQ(d.architecture, "Phi3ForCausalLM");
    ASSERT_EQ(d.layers.size(), 32u);
    const auto t = table(d);
    EXPECT_EQ(t.at("model.layers.0.self_attn.qkv_proj.weight"), (Shape{3 * 3072, 3072}));
    EXPECT_EQ(t.at("model.layers.31.mlp.gate_up_proj.weight"), (Shape{2 * 8192, 3072}));
    EXPECT_EQ(t.at("model.layers.0.self_attn.o_proj.weight"), (Shape{3072, 3072}));
    EXPECT_EQ(t.at("model.layers.0.mlp.down_proj.weight"), (Shape{3072, 8192}));
    EXPECT_EQ(t.at("lm_head.weight"), (Shape{32064, 3072}));
    EXPECT_EQ(t.count("model.layers.0.self_attn.q_proj.weight"), 0u);
    EXPECT_EQ(t.count("model.layers.0.mlp.gate_proj.weight"), 0u);
    EXPECT_EQ(t.size(), 3 + 32 * 6u);  // embed, norm, lm_head; 2 norms + 4 projections a layer
    const LayerDef& l = d.layers[0];
    ASSERT_EQ(l.qkv.sources.size(), 1u);
    EXPECT_EQ(l.qkv.sources[0].num_segments, 3);
    EXPECT_EQ(l.qkv.out_segments, (std::vector<int64_t>{3072, 3072, 3072}));
    ASSERT_EQ(l.gate_up.sources.size(), 1u);
    EXPECT_EQ(l.gate_up.out_segments, (std::vector<int64_t>{8192, 8192}));
    EXPECT_FALSE(l.qkv.bias);
    EXPECT_EQ(l.activation, Activation::kSilu);
    EXPECT_TRUE(d.is_plain_llama_block());
  }
  // 4k: the 2047-key window on every layer (as transformers applies Phi-3's sliding_window).
  EXPECT_EQ(define_model(real_config("phi-3-mini-4k-instruct")).common_window(), 2047);
  // 128k: no window (262144 > 131072); LongRoPE, long factors beyond 4096 tokens, and the
  // attention factor sqrt(1 + ln 32 / ln 4096) in the scale.
  const ModelConfig c = real_config("phi-3-mini-128k-instruct");
  ASSERT_EQ(c.rope.scaling, RopeScalingType::kLongRope);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_EQ(c.rope.long_factor.size(), 48u);
  const ModelDefinition d = define_model(c);
  EXPECT_EQ(d.common_window(), 0);
  const double af = std::sqrt(1 + std::log(32.0) / std::log(4096.0));
  EXPECT_NEAR(d.layers[0].attention.scale, af * af / std::sqrt(96.0), 1e-6);
  EXPECT_EQ(d.rope_inv_freq, rope_tables(c.rope, 96, 131072).inv_freq);
  const ModelDefinition short_ctx = define_model(c, DefinitionOptions{4096});
  EXPECT_EQ(short_ctx.rope_inv_freq, rope_tables(c.rope, 96, 4096).inv_freq);
  EXPECT_NE(short_ctx.rope_inv_freq, d.rope_inv_freq);
  EXPECT_NEAR(d.rope_inv_freq[47], std::pow(10000.0, -94.0 / 96) / c.rope.long_factor[47], 1e-12);
}

TEST(Families, Gemma2DefinitionHasItsNormsScalesAndWindows) {
  for (const char* name : {"gemma-2-2b", "gemma-2-9b", "gemma-2-27b"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = real_config(name);
    const ModelDefinition d = define_model(c);
    EXPECT_EQ(d.embed_scale, static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size))));
    EXPECT_TRUE(d.embed_scale_in_activation_dtype);
    EXPECT_EQ(d.final_softcap, 30.0f);
    EXPECT_TRUE(d.lm_head_tied);  // Gemma2Config's default: the files do not say
    EXPECT_EQ(d.final_norm.weight_offset, 1.0f);
    EXPECT_FALSE(d.is_plain_llama_block());
    const double scalar = c.json->at("query_pre_attn_scalar").get<double>();
    for (size_t l = 0; l < d.layers.size(); ++l) {
      const LayerDef& layer = d.layers[l];
      const std::string p = "model.layers." + std::to_string(l) + ".";
      EXPECT_EQ(layer.input_norm.name, p + "input_layernorm.weight");
      ASSERT_TRUE(layer.post_attention_norm);
      EXPECT_EQ(layer.post_attention_norm->name, p + "post_attention_layernorm.weight");
      EXPECT_EQ(layer.pre_mlp_norm.name, p + "pre_feedforward_layernorm.weight");
      ASSERT_TRUE(layer.post_mlp_norm);
      EXPECT_EQ(layer.post_mlp_norm->name, p + "post_feedforward_layernorm.weight");
      for (const NormDef* n : {&layer.input_norm, &*layer.post_attention_norm, &layer.pre_mlp_norm,
                               &*layer.post_mlp_norm})
        EXPECT_EQ(n->weight_offset, 1.0f) << n->name;
      EXPECT_EQ(layer.activation, Activation::kGeluTanh);
      EXPECT_FLOAT_EQ(layer.attention.scale, static_cast<float>(1 / std::sqrt(scalar)));
      EXPECT_EQ(layer.attention.softcap, 50.0f);
      EXPECT_EQ(layer.attention.head_dim, c.head_dim);
      // Even layers slide over 4096 keys (transformers' Gemma-2 rule without layer_types).
      EXPECT_EQ(layer.attention.sliding_window, l % 2 == 0 ? 4096 : 0) << l;
    }
    const auto t = table(d);
    EXPECT_EQ(t.count("lm_head.weight"), 0u);
    EXPECT_EQ(t.size(), 2 + d.layers.size() * 11);  // embed, norm; 4 norms + 7 projections a layer
    EXPECT_EQ(t.at("model.layers.1.self_attn.q_proj.weight"),
              (Shape{c.num_heads * int64_t{c.head_dim}, c.hidden_size}));
  }
  EXPECT_FLOAT_EQ(define_model(real_config("gemma-2-27b")).layers[0].attention.scale,
                  static_cast<float>(1 / std::sqrt(144.0)));  // not head_dim (128)
  // layer_types (what transformers v5 writes) decides when given; null soft-caps are off.
  ModelConfig c = real_config("gemma-2-2b");
  json j = *c.json;
  j["layer_types"] = std::vector<std::string>(26, "full_attention");
  j["layer_types"][3] = "sliding_attention";
  j["final_logit_softcapping"] = nullptr;
  j["attn_logit_softcapping"] = nullptr;
  c = parse_model_config(j.dump(), "config.json");
  const ModelDefinition d = define_model(c);
  for (size_t l = 0; l < d.layers.size(); ++l) {
    EXPECT_EQ(d.layers[l].attention.sliding_window, l == 3 ? 4096 : 0) << l;
    EXPECT_EQ(d.layers[l].attention.softcap, 0.0f);
  }
  EXPECT_EQ(d.final_softcap, 0.0f);
}

TEST(Families, QwenYarnConfigScalesTheAttention) {
  const ModelConfig c = real_config("qwen2.5-7b-yarn");
  ASSERT_EQ(c.rope.scaling, RopeScalingType::kYarn);
  EXPECT_EQ(rope_context_length(c.rope), 131072);  // vLLM's derived max_model_len
  const ModelDefinition d = define_model(c);
  const double af = 0.1 * std::log(4.0) + 1;
  EXPECT_NEAR(d.layers[0].attention.scale, af * af / std::sqrt(128.0), 1e-6);
  EXPECT_EQ(d.rope_inv_freq, rope_tables(c.rope, 128, 0).inv_freq);
}

// ---- tiny checkpoints against a double-precision reference ----------------------------------

/// A reproducible pseudo-random value in [-1, 1).
float noise(uint64_t& state) {
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  return static_cast<float>(static_cast<double>(state >> 11) / 4503599627370496.0 - 1.0);
}

/// Random weights for every tensor of the definition (norm weights around their convention's
/// identity, everything else small), written to dir/model.safetensors.
Weights write_checkpoint(const ModelDefinition& d, const testing::TempDir& dir, uint64_t seed) {
  Weights w;
  std::map<std::string, testing::RawTensor> raw;
  for (const TensorSpec& t : d.tensors()) {
    std::vector<float> v(static_cast<size_t>(t.shape.num_elements()));
    const bool norm = t.shape.rank() == 1 && t.name.find("norm") != std::string::npos;
    const bool offset = norm && d.final_norm.weight_offset != 0;  // Gemma: 1 + w
    for (float& x : v) x = norm ? (offset ? 0.0f : 1.0f) + 0.3f * noise(seed) : 0.4f * noise(seed);
    testing::RawTensor r{
        "F32", {}, std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float))};
    for (int i = 0; i < t.shape.rank(); ++i) r.shape.push_back(t.shape[i]);
    raw[t.name] = r;
    w[t.name] = std::move(v);
  }
  testing::write_file(dir.path() / "model.safetensors", testing::safetensors_bytes(raw));
  return w;
}

using Vec = std::vector<double>;

Vec rms_norm(const Vec& x, const std::vector<float>& w, float offset, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * (offset + w[i]);
  return y;
}

/// y = W x (+ b) for a LinearDef, W assembled from its sources.
Vec project(const LinearDef& l, const Weights& w, const Vec& x) {
  Vec y(static_cast<size_t>(l.out()), 0.0);
  for (const LinearDef::Source& s : l.sources) {
    const std::vector<float>& m = w.at(s.prefix + ".weight");
    const int64_t off = l.source_offset(s), rows = l.source_rows(s);
    for (int64_t r = 0; r < rows; ++r) {
      double acc = l.bias ? w.at(s.prefix + ".bias")[static_cast<size_t>(r)] : 0.0;
      for (int64_t k = 0; k < l.in; ++k) acc += m[static_cast<size_t>(r * l.in + k)] * x[k];
      y[static_cast<size_t>(off + r)] = acc;
    }
  }
  return y;
}

double act(Activation a, double g) {
  if (a == Activation::kSilu) return g / (1 + std::exp(-g));
  const double c = std::sqrt(2 / std::numbers::pi);
  return 0.5 * g * (1 + std::tanh(c * (g + 0.044715 * g * g * g)));
}

double cap(double x, double c) { return c > 0 ? c * std::tanh(x / c) : x; }

/// Rotate-half RoPE of one head in place.
void rope(double* v, int head_dim, int pos, const std::vector<float>& inv_freq) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double a = pos * static_cast<double>(inv_freq[static_cast<size_t>(i)]);
    const double x1 = v[i], x2 = v[i + half];
    v[i] = x1 * std::cos(a) - x2 * std::sin(a);
    v[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
  }
}

/// Logits [tokens, vocab] of the decoder of definition.h's block diagram, in double precision.
std::vector<Vec> reference_logits(const ModelDefinition& d, const Weights& w,
                                  const std::vector<int32_t>& tokens) {
  const auto T = static_cast<int>(tokens.size());
  const int64_t H = d.hidden_size;
  std::vector<Vec> x(static_cast<size_t>(T), Vec(static_cast<size_t>(H)));
  const std::vector<float>& emb = w.at(d.embed_name);
  for (int t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i)
      x[t][i] = emb[static_cast<size_t>(tokens[t] * H + i)] * static_cast<double>(d.embed_scale);
  for (const LayerDef& l : d.layers) {
    const AttentionDef& a = l.attention;
    const int hd = a.head_dim, group = a.num_heads / a.num_kv_heads;
    std::vector<Vec> q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      const Vec qkv =
          project(l.qkv, w,
                  rms_norm(x[t], w.at(l.input_norm.name), l.input_norm.weight_offset, d.norm_eps));
      q[t].assign(qkv.begin(), qkv.begin() + a.q_size());
      k[t].assign(qkv.begin() + a.q_size(), qkv.begin() + a.q_size() + a.kv_size());
      v[t].assign(qkv.begin() + a.q_size() + a.kv_size(), qkv.end());
      for (int h = 0; h < a.num_heads; ++h) rope(&q[t][h * hd], hd, t, d.rope_inv_freq);
      for (int h = 0; h < a.num_kv_heads; ++h) rope(&k[t][h * hd], hd, t, d.rope_inv_freq);
    }
    for (int t = 0; t < T; ++t) {
      Vec out(static_cast<size_t>(a.q_size()), 0.0);
      const int first = a.sliding_window > 0 ? std::max(0, t - a.sliding_window + 1) : 0;
      for (int h = 0; h < a.num_heads; ++h) {
        const int kvh = h / group;
        Vec s;
        double mx = -1e300;
        for (int j = first; j <= t; ++j) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += q[t][h * hd + i] * k[j][kvh * hd + i];
          s.push_back(cap(dot * a.scale, a.softcap));
          mx = std::max(mx, s.back());
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int j = first; j <= t; ++j)
          for (int i = 0; i < hd; ++i)
            out[h * hd + i] += s[static_cast<size_t>(j - first)] / sum * v[j][kvh * hd + i];
      }
      Vec o = project(l.o, w, out);
      if (l.post_attention_norm)
        o = rms_norm(o, w.at(l.post_attention_norm->name), l.post_attention_norm->weight_offset,
                     d.norm_eps);
      for (int64_t i = 0; i < H; ++i) x[t][i] += o[i];
      const Vec gu = project(
          l.gate_up, w,
          rms_norm(x[t], w.at(l.pre_mlp_norm.name), l.pre_mlp_norm.weight_offset, d.norm_eps));
      const int64_t inter = l.gate_up.out_segments[0];
      Vec m(static_cast<size_t>(inter));
      for (int64_t i = 0; i < inter; ++i) m[i] = act(l.activation, gu[i]) * gu[inter + i];
      Vec down = project(l.down, w, m);
      if (l.post_mlp_norm)
        down =
            rms_norm(down, w.at(l.post_mlp_norm->name), l.post_mlp_norm->weight_offset, d.norm_eps);
      for (int64_t i = 0; i < H; ++i) x[t][i] += down[i];
    }
  }
  const std::vector<float>& head = d.lm_head_tied ? emb : w.at("lm_head.weight");
  std::vector<Vec> logits;
  for (int t = 0; t < T; ++t) {
    const Vec f = rms_norm(x[t], w.at(d.final_norm.name), d.final_norm.weight_offset, d.norm_eps);
    Vec row(static_cast<size_t>(d.vocab_size));
    for (int64_t r = 0; r < d.vocab_size; ++r) {
      double acc = 0;
      for (int64_t i = 0; i < H; ++i) acc += head[static_cast<size_t>(r * H + i)] * f[i];
      row[r] = cap(acc, d.final_softcap);
    }
    logits.push_back(std::move(row));
  }
  return logits;
}

/// The CPU model's logits for every position: a prefill of the first `prefill` tokens, then one
/// token per step through the paged cache (block size 4, blocks out of order).
std::vector<std::vector<float>> cpu_logits(Model& model, const std::vector<int32_t>& tokens,
                                           size_t prefill) {
  const int block = 4;
  const auto blocks = static_cast<int32_t>(tokens.size() / block + 2);
  model.init_kv_cache(blocks, block);
  std::vector<int32_t> table;
  for (int32_t b = 0; b < blocks; ++b) table.push_back(blocks - 1 - b);
  std::vector<std::vector<float>> out;
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t end = begin == 0 ? prefill : begin + 1;
    std::vector<int32_t> ids(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                             tokens.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<int32_t> pos, rows;
    std::vector<int64_t> slots;
    for (size_t i = begin; i < end; ++i) {
      pos.push_back(static_cast<int32_t>(i));
      slots.push_back(int64_t{table[i / block]} * block + static_cast<int64_t>(i % block));
      rows.push_back(static_cast<int32_t>(i - begin));
    }
    const std::vector<int32_t> qsl{0, static_cast<int32_t>(ids.size())},
        lens{static_cast<int32_t>(end)};
    const ForwardBatch batch{ids,   pos, qsl, lens, table, static_cast<int>(table.size()),
                             slots, rows};
    const std::span<float> logits = model.forward(batch);
    for (size_t r = 0; r < ids.size(); ++r)
      out.emplace_back(logits.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                       logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
    begin = end;
  }
  return out;
}

json tiny(const char* arch) {
  return json{{"architectures", {arch}},  {"vocab_size", 40},
              {"hidden_size", 32},        {"intermediate_size", 48},
              {"num_hidden_layers", 2},   {"num_attention_heads", 4},
              {"num_key_value_heads", 2}, {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-6},     {"tie_word_embeddings", false}};
}

/// Loads config (+ random weights) on the CPU and compares every position's logits with the
/// reference; returns the CPU logits.
std::vector<std::vector<float>> check_against_reference(const json& config,
                                                        const DefinitionOptions& options = {}) {
  testing::TempDir dir;
  testing::write_file(dir.path() / "config.json", config.dump());
  const ModelConfig c = load_model_config(dir.str());
  const ModelDefinition d = define_model(c, options);
  const Weights w = write_checkpoint(d, dir, 7);
  ThreadPool pool(2);
  LoadOptions load;
  load.definition = options;
  auto model = load_model(dir.str(), load, pool);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 14; ++i) tokens.push_back((i * 17 + 3) % 40);
  const auto got = cpu_logits(*model, tokens, 9);
  const auto want = reference_logits(model->definition(), w, tokens);
  double err = 0, scale = 0;
  for (size_t t = 0; t < tokens.size(); ++t)
    for (size_t i = 0; i < want[t].size(); ++i) {
      err = std::max(err, std::abs(got[t][i] - want[t][i]));
      scale = std::max(scale, std::abs(want[t][i]));
    }
  EXPECT_LT(err, 2e-5 * std::max(1.0, scale)) << "max |logit| " << scale;
  EXPECT_GT(scale, 0.1);
  return got;
}

TEST(Families, Phi3TinyCheckpointMatchesTheReference) {
  json c = tiny("Phi3ForCausalLM");
  check_against_reference(c);
  // LongRoPE: long factors (max_model_len 64 > original 8) and short ones (max_model_len 8).
  std::vector<double> short_f, long_f;
  for (int i = 0; i < 4; ++i) {
    short_f.push_back(1.0 + 0.3 * i);
    long_f.push_back(std::pow(8.0, i / 3.0));
  }
  c["original_max_position_embeddings"] = 8;
  c["rope_scaling"] = {{"type", "longrope"}, {"short_factor", short_f}, {"long_factor", long_f}};
  const auto long_logits = check_against_reference(c);
  const auto short_logits = check_against_reference(c, DefinitionOptions{8});
  EXPECT_NE(long_logits[5], short_logits[5]);
}

TEST(Families, Gemma2TinyCheckpointMatchesTheReference) {
  json c = tiny("Gemma2ForCausalLM");
  c["head_dim"] = 16;  // q: 64 rows from a hidden size of 32
  c["query_pre_attn_scalar"] = 12;
  c["attn_logit_softcapping"] = 1.5;
  c["final_logit_softcapping"] = 2.0;
  c["sliding_window"] = 3;  // even layers: the window ends inside the prompt
  c.erase("tie_word_embeddings");
  const auto capped = check_against_reference(c);
  for (const auto& row : capped)
    for (float x : row) EXPECT_LE(std::abs(x), 2.0f);
  c["layer_types"] = {"full_attention", "sliding_attention"};
  check_against_reference(c);
}

TEST(Families, YarnAndDynamicTinyCheckpointsMatchTheReference) {
  json c = tiny("Qwen2ForCausalLM");
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 8}};
  check_against_reference(c);
  c = tiny("LlamaForCausalLM");
  c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  check_against_reference(c);                         // max_model_len 128: the NTK base
  check_against_reference(c, DefinitionOptions{64});  // the plain base
}

TEST(Families, FusedPhi3EqualsTheSameWeightsSplitIntoLlama) {
  testing::TempDir phi3_dir, llama_dir;
  const json phi3 = tiny("Phi3ForCausalLM");
  json llama = phi3;
  llama["architectures"] = {"LlamaForCausalLM"};
  testing::write_file(phi3_dir.path() / "config.json", phi3.dump());
  testing::write_file(llama_dir.path() / "config.json", llama.dump());
  const ModelDefinition d = define_model(load_model_config(phi3_dir.str()));
  (void)write_checkpoint(d, phi3_dir, 11);
  auto raw = testing::read_raw_tensors((phi3_dir.path() / "model.safetensors").string());
  const auto split = [&](const std::string& fused, const std::vector<std::string>& parts,
                         const std::vector<int64_t>& rows) {
    const testing::RawTensor t = raw.at(fused);
    size_t offset = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const size_t bytes = static_cast<size_t>(rows[i] * t.shape[1]) * sizeof(float);
      raw[parts[i]] = {"F32", {rows[i], t.shape[1]}, t.bytes.substr(offset, bytes)};
      offset += bytes;
    }
    raw.erase(fused);
  };
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    split(p + "self_attn.qkv_proj.weight",
          {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
           p + "self_attn.v_proj.weight"},
          {32, 16, 16});
    split(p + "mlp.gate_up_proj.weight", {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
          {48, 48});
  }
  testing::write_file(llama_dir.path() / "model.safetensors", testing::safetensors_bytes(raw));
  ThreadPool pool(2);
  auto a = load_model(phi3_dir.str(), LoadOptions{}, pool);
  auto b = load_model(llama_dir.str(), LoadOptions{}, pool);
  const std::vector<int32_t> tokens{1, 5, 9, 22, 31, 7, 3, 18};
  EXPECT_EQ(cpu_logits(*a, tokens, 5), cpu_logits(*b, tokens, 5));
}

TEST(Families, LoadErrorsNameTheField) {
  const auto error_of = [](const json& config) -> std::string {
    testing::TempDir dir;
    testing::write_file(dir.path() / "config.json", config.dump());
    try {
      const ModelDefinition d = define_model(load_model_config(dir.str()));
      (void)write_checkpoint(d, dir, 1);
      ThreadPool pool(1);
      (void)load_model(dir.str(), LoadOptions{}, pool);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const auto expect_error = [&](const json& config, const std::string& part) {
    const std::string e = error_of(config);
    EXPECT_NE(e.find("config.json: field '" + part), std::string::npos) << e;
  };
  json c = tiny("Phi3ForCausalLM");
  c["partial_rotary_factor"] = 0.75;  // Phi-4-mini
  expect_error(c, "partial_rotary_factor' other than 1.0 (a partial rotary embedding) is not");
  c = tiny("Phi3ForCausalLM");
  c["hidden_act"] = "gelu";
  expect_error(c, "hidden_act': 'gelu' is not supported");
  c = tiny("Phi3ForCausalLM");
  c["rope_scaling"] = {{"type", "longrope"}, {"short_factor", {1.0, 1.0, 1.0, 1.0}}};
  expect_error(c, "rope_scaling.long_factor' is missing");
  c = tiny("Gemma2ForCausalLM");
  c["hidden_activation"] = "gelu";  // exact GELU: not what Gemma-2 runs
  expect_error(c, "hidden_activation': 'gelu' is not supported");
  c = tiny("Gemma2ForCausalLM");
  c["query_pre_attn_scalar"] = 0;
  expect_error(c, "query_pre_attn_scalar' must be > 0");
  c = tiny("Gemma2ForCausalLM");
  c["attn_logit_softcapping"] = -1.0;
  expect_error(c, "attn_logit_softcapping' must be >= 0 or null");
  c = tiny("Gemma2ForCausalLM");
  c["final_logit_softcapping"] = "thirty";
  expect_error(c, "final_logit_softcapping' must be a number");
}

}  // namespace
}  // namespace pagoda
