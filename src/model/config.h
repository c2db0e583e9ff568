#pragma once
// ModelConfig: the shape and hyper-parameters of a decoder-only transformer, read from a Hugging
// Face config.json (transformers v4 or v5 dialect) and the optional generation_config.json.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/dtype.h"
#include "model/rope.h"

namespace pagoda {

/// Defaults a checkpoint suggests for sampling (generation_config.json); unset fields stay empty.
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> repetition_penalty;
};

/// Everything the model code needs to know about a checkpoint's architecture.
struct ModelConfig {
  std::string architecture;  // architectures[0], the registry key
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // may differ from hidden_size / num_heads (Qwen3, Llama 3.2)
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and o for Llama's attention_bias) biases
  bool mlp_bias = false;
  std::string hidden_act = "silu";   // the MLP's activation; each family checks it supports it
  int sliding_window = 0;            // keys of the window of the layers that have one; 0: none has
  std::vector<bool> sliding_layers;  // [num_layers] when sliding_window > 0: which layers
  DType dtype = DType::kF32;         // the checkpoint's declared dtype (torch_dtype / dtype)
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
  GenerationDefaults generation;
  /// config.json as parsed, for the fields only one family reads (model/arch/ reads them through
  /// ConfigReader), and the file it came from.
  std::shared_ptr<const nlohmann::json> json;
  std::string source;

  /// The sliding window of layer `layer` (PagedAttentionParams::sliding_window): 0 for full
  /// attention.
  [[nodiscard]] int layer_window(int layer) const {
    return sliding_window > 0 && sliding_layers[static_cast<size_t>(layer)] ? sliding_window : 0;
  }
  /// The window every layer shares, or 0 when some layer attends to all keys.
  [[nodiscard]] int common_window() const {
    for (bool s : sliding_layers)
      if (!s) return 0;
    return sliding_window;
  }
  [[nodiscard]] int64_t q_size() const { return static_cast<int64_t>(num_heads) * head_dim; }
  [[nodiscard]] int64_t kv_size() const { return static_cast<int64_t>(num_kv_heads) * head_dim; }
};

/// Parses config.json text; `source` names the file in error messages. Throws InvalidArgument
/// naming the file and the field for malformed, incomplete or unsupported configs.
[[nodiscard]] ModelConfig parse_model_config(const std::string& json_text,
                                             const std::string& source);

/// Merges generation_config.json (eos ids, sampling defaults) into config.
void apply_generation_config(const std::string& json_text, const std::string& source,
                             ModelConfig& config);

/// Reads config.json and, when present, generation_config.json from a model directory.
[[nodiscard]] ModelConfig load_model_config(const std::string& model_dir);

}  // namespace pagoda
