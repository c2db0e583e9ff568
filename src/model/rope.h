#pragma once
// Rotary position embeddings: the parameters config.json gives (both transformers dialects: v4's
// top-level rope_theta + rope_scaling, v5's rope_parameters) and the tables a model needs, the
// per-pair inverse frequencies and the attention factor, for each scaling transformers knows:
// linear, llama3, dynamic NTK, YaRN and LongRoPE ("su").
//
// How the sequence-length dependent scalings are made static (transformers recomputes them per
// forward pass; pagoda, as vLLM, fixes them once from the engine's max_model_len):
//  - LongRoPE: long_factor iff max_model_len > original_max_position_embeddings, else short_factor.
//  - dynamic NTK: the unscaled base while max_model_len <= max_position_embeddings (what
//    transformers uses for every sequence that fits), else the NTK base at max_model_len.
// max_model_len defaults to rope_context_length (vLLM's derived maximum: max_position_embeddings
// times the factor for linear and dynamic, original_max_position_embeddings times the factor for
// YaRN). docs/engine.md ("RoPE scaling") says what this means for users.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pagoda {

/// How rotary frequencies are rescaled for long contexts.
enum class RopeScalingType : uint8_t { kNone, kLinear, kLlama3, kDynamic, kYarn, kLongRope };

/// RoPE parameters; the two config dialects both land here.
struct RopeConfig {
  double theta = 10000.0;
  RopeScalingType scaling = RopeScalingType::kNone;
  double factor = 1.0;            // linear, llama3, dynamic, yarn (longrope: for the mscale only)
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;   // llama3, yarn, longrope
  int64_t max_position_embeddings = 0;            // config.json's (dynamic, longrope, contexts)
  std::optional<double> attention_factor;         // yarn, longrope: given in the config
  double beta_fast = 32.0;                        // yarn
  double beta_slow = 1.0;                         // yarn
  double mscale = 0.0;                            // yarn (DeepSeek): 0 when absent
  double mscale_all_dim = 0.0;                    // yarn (DeepSeek): 0 when absent
  bool truncate = true;                           // yarn: round the correction range outwards
  std::vector<double> short_factor, long_factor;  // longrope: [head_dim / 2] each
};

/// RoPE parameters of a parsed config.json object; `source` names the file in errors, which name
/// the field (InvalidArgument). head_dim and max_position_embeddings are the config's.
[[nodiscard]] RopeConfig parse_rope_config(const nlohmann::json& config, const std::string& source,
                                           int head_dim, int64_t max_position_embeddings);

/// The longest context the scaling serves, as vLLM derives max_model_len from config.json.
[[nodiscard]] int64_t rope_context_length(const RopeConfig& rope);

/// What a model's rotary embedding needs: the inverse frequencies and the factor by which the
/// scaling multiplies cos and sin (YaRN's and LongRoPE's mscale; 1 otherwise). Backends fold the
/// factor into the attention scale: rotating q and k both by it multiplies q.k by its square.
struct RopeTables {
  std::vector<float> inv_freq;  // [head_dim / 2]
  float attention_factor = 1.0f;
};
/// The tables for an engine serving up to max_model_len tokens (0: rope_context_length), computed
/// as transformers computes them (float32 tensor arithmetic mirrored step by step).
[[nodiscard]] RopeTables rope_tables(const RopeConfig& rope, int head_dim, int64_t max_model_len);

/// rope_tables(rope, head_dim, 0).inv_freq.
[[nodiscard]] std::vector<float> rope_inv_freq(const RopeConfig& rope, int head_dim);

}  // namespace pagoda
