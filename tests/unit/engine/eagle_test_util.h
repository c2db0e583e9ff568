#pragma once
// Tiny EAGLE-1, EAGLE-3 and parallel-drafter checkpoints for stories260K (hidden 64, 8 heads of 8,
// 4 KV heads, MLP 172, vocabulary 512), written once per process into temporary directories in the
// Hugging Face layouts model/eagle_head.h and runtime/draft_proposer.h describe. The heads' weights
// are small random values (fixed seeds) around a pass-through: fc copies the target's hidden state
// into the residual stream, so the head's logits resemble the target's and drafts are sometimes
// accepted, sometimes not.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../model/test_checkpoint.h"
#include "draft_model_test_util.h"
#include "engine_test_util.h"

namespace pagoda::eagle_test {

using testing::RawTensor;

inline RawTensor f32(std::vector<int64_t> shape, const std::vector<float>& values) {
  RawTensor t{"F32", std::move(shape), {}};
  t.bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return t;
}

/// [rows, cols] uniform in [-scale, scale) from `rng`, plus `diagonal` on element (i, offset + i).
inline RawTensor random_matrix(std::mt19937& rng, int64_t rows, int64_t cols, float scale,
                               float diagonal = 0.0f, int64_t offset = 0) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (float& x : v) x = u(rng);
  for (int64_t i = 0; i < rows && offset + i < cols; ++i)
    v[static_cast<size_t>(i * cols + offset + i)] += diagonal;
  return f32({rows, cols}, v);
}

inline RawTensor ones(int64_t n) {
  return f32({n}, std::vector<float>(static_cast<size_t>(n), 1.f));
}

/// stories260K's config.json with `edit` applied.
inline nlohmann::json stories_config() {
  std::ifstream in(engine_test::kStories + "/config.json");
  return nlohmann::json::parse(in);
}

/// One decoder layer's tensors under `prefix`, the attention input `in` wide; EAGLE-1's layer has
/// no input_layernorm, EAGLE-3's has its hidden_norm too.
inline void add_layer(std::map<std::string, RawTensor>& t, std::mt19937& rng,
                      const std::string& prefix, int64_t in, bool input_norm, bool hidden_norm) {
  constexpr int64_t h = 64, q = 64, kv = 32, inter = 172;
  t[prefix + "self_attn.q_proj.weight"] = random_matrix(rng, q, in, 0.08f);
  t[prefix + "self_attn.k_proj.weight"] = random_matrix(rng, kv, in, 0.08f);
  t[prefix + "self_attn.v_proj.weight"] = random_matrix(rng, kv, in, 0.08f);
  t[prefix + "self_attn.o_proj.weight"] = random_matrix(rng, h, q, 0.02f);
  t[prefix + "mlp.gate_proj.weight"] = random_matrix(rng, inter, h, 0.05f);
  t[prefix + "mlp.up_proj.weight"] = random_matrix(rng, inter, h, 0.05f);
  t[prefix + "mlp.down_proj.weight"] = random_matrix(rng, h, inter, 0.02f);
  t[prefix + "post_attention_layernorm.weight"] = ones(h);
  if (input_norm) t[prefix + "input_layernorm.weight"] = ones(h);
  if (hidden_norm) t[prefix + "hidden_norm.weight"] = ones(h);
}

inline void write_checkpoint(const std::string& dir, const nlohmann::json& config,
                             const std::map<std::string, RawTensor>& tensors) {
  std::ofstream(dir + "/config.json") << config.dump(2);
  testing::write_file(dir + "/model.safetensors", testing::safetensors_bytes(tensors));
}

/// EAGLE-1: fc [64, 128] = [small | I + small] over concat(embed, h); layers.0 without its input
/// norm; the embedding and LM head are the target's (stories260K ties them).
inline const std::string& eagle1_head() {
  static const std::string dir = [] {
    const std::string out = draft_test::temp_dir("eagle1_head");
    nlohmann::json c = stories_config();
    c["num_hidden_layers"] = 1;
    std::mt19937 rng(11);
    std::map<std::string, RawTensor> t;
    t["fc.weight"] = random_matrix(rng, 64, 128, 0.02f, 0.3f, 64);
    add_layer(t, rng, "layers.0.", 64, /*input_norm=*/false, /*hidden_norm=*/false);
    write_checkpoint(out, c, t);
    return out;
  }();
  return dir;
}

/// EAGLE-3: fc [64, 192] over three target layers (the last block passed through), midlayer
/// over 128 inputs, norm, a draft vocabulary of 256 ids: draft id i is target id 2i (d2t[i] = i),
/// its lm_head row the target's embedding row 2i; t2d as real checkpoints carry it.
inline const std::string& eagle3_head() {
  static const std::string dir = [] {
    const std::string out = draft_test::temp_dir("eagle3_head");
    nlohmann::json c = stories_config();
    c["architectures"] = {"LlamaForCausalLMEagle3"};
    c["num_hidden_layers"] = 1;
    c["draft_vocab_size"] = 256;
    c["tie_word_embeddings"] = false;
    std::mt19937 rng(13);
    std::map<std::string, RawTensor> t;
    t["fc.weight"] = random_matrix(rng, 64, 192, 0.02f, 1.0f, 128);
    add_layer(t, rng, "midlayer.", 128, /*input_norm=*/true, /*hidden_norm=*/true);
    t["norm.weight"] = f32({64}, std::vector<float>(64, 0.3f));
    const std::map<std::string, RawTensor> target =
        testing::read_raw_tensors(engine_test::kStories + "/model.safetensors");
    const RawTensor& embed = target.at("model.embed_tokens.weight");
    RawTensor head{"F32", {256, 64}, {}};
    std::vector<int64_t> d2t(256);
    std::string t2d(512, '\0');
    for (int64_t i = 0; i < 256; ++i) {
      head.bytes += embed.bytes.substr(static_cast<size_t>(2 * i * 64 * 4), 64 * 4);
      d2t[static_cast<size_t>(i)] = i;
      t2d[static_cast<size_t>(2 * i)] = 1;
    }
    t["lm_head.weight"] = head;
    t["d2t"] = RawTensor{
        "I64",
        {256},
        std::string(reinterpret_cast<const char*>(d2t.data()), d2t.size() * sizeof(int64_t))};
    t["t2d"] = RawTensor{"BOOL", {512}, t2d};
    write_checkpoint(out, c, t);
    return out;
  }();
  return dir;
}

/// A parallel drafter: the perturbed stories260K (draft_model_test_util.h) with mask_token_id 3.
inline const std::string& parallel_drafter() {
  static const std::string dir = [] {
    const std::string out = draft_test::temp_dir("parallel_drafter");
    const std::string from = draft_test::perturbed_stories();
    for (const auto& f : std::filesystem::directory_iterator(from)) {
      if (f.path().filename() != "config.json")
        std::filesystem::copy_file(f.path(), out + "/" + f.path().filename().string());
    }
    nlohmann::json c = stories_config();
    c["mask_token_id"] = 3;
    std::ofstream(out + "/config.json") << c.dump(2);
    return out;
  }();
  return dir;
}

/// stories260K speculating with `method` and the head or drafter in `dir`.
inline EngineArgs spec_engine(const std::string& method, const std::string& dir, int k,
                              bool adaptive) {
  return draft_test::speculating(engine_test::small_engine(512), method, dir, k, adaptive);
}

}  // namespace pagoda::eagle_test
