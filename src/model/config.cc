#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "core/status.h"
#include "model/config_reader.h"

namespace pagoda {
namespace {

using nlohmann::json;

/// Which layers attend through a sliding window, as transformers decides it:
/// - "layer_types" (written by recent transformers): "sliding_attention" or "full_attention" per
///   layer;
/// - else Qwen2 and Qwen3 (use_sliding_window, default false there): the layers from
///   max_window_layers on;
/// - else (Mistral) every layer, when sliding_window is set (null from Mistral v0.2 on).
/// A window as long as max_position_embeddings or longer never limits anything: none.
void parse_sliding_window(const json& j, const ConfigReader& r, ModelConfig& c) {
  const bool qwen = c.model_type == "qwen2" || c.model_type == "qwen3";
  if (!r.optional_bool("use_sliding_window", !qwen)) return;
  const int window = static_cast<int>(r.optional_int("sliding_window", 0, 0));
  if (window == 0 || window >= c.max_position_embeddings) return;
  c.sliding_window = window;
  c.sliding_layers.assign(static_cast<size_t>(c.num_layers), true);
  if (r.has("layer_types")) {
    const json& types = j.at("layer_types");
    if (!types.is_array() || types.size() != static_cast<size_t>(c.num_layers))
      r.fail("layer_types", fmt::format("must list one type per layer ({})", c.num_layers));
    for (size_t l = 0; l < types.size(); ++l) {
      const std::string t = types[l].is_string() ? types[l].get<std::string>() : "";
      if (t != "full_attention" && t != "sliding_attention")
        r.fail("layer_types", fmt::format("entry {} must be \"full_attention\" or "
                                          "\"sliding_attention\"",
                                          l));
      c.sliding_layers[l] = t == "sliding_attention";
    }
  } else if (qwen) {
    const int64_t first = r.optional_int("max_window_layers", c.num_layers, 0);
    for (int l = 0; l < c.num_layers; ++l) c.sliding_layers[static_cast<size_t>(l)] = l >= first;
  }
  if (std::none_of(c.sliding_layers.begin(), c.sliding_layers.end(), [](bool b) { return b; })) {
    c.sliding_window = 0;
    c.sliding_layers.clear();
  }
}

// A config file's text as a JSON object, or InvalidArgument naming the file.
json parse_json_object(const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw InvalidArgument(fmt::format("{}: malformed JSON: {}", source, e.what()));
  }
  if (!j.is_object()) throw InvalidArgument(fmt::format("{}: must hold a JSON object", source));
  return j;
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  const json j = parse_json_object(json_text, source);
  ConfigReader r(j, source);

  ModelConfig c;
  if (!r.has("architectures")) r.fail("architectures", "is missing");
  const json& archs = j.at("architectures");
  if (!archs.is_array() || archs.empty() || !archs[0].is_string()) {
    r.fail("architectures", "must be a non-empty list of strings");
  }
  c.architecture = archs[0].get<std::string>();
  c.model_type = r.optional_string("model_type", "");
  c.vocab_size = r.required_int("vocab_size");
  c.hidden_size = r.required_int("hidden_size");
  c.intermediate_size = r.required_int("intermediate_size");
  c.num_layers = static_cast<int>(r.required_int("num_hidden_layers"));
  c.num_heads = static_cast<int>(r.required_int("num_attention_heads"));
  c.num_kv_heads = static_cast<int>(r.optional_int("num_key_value_heads", c.num_heads, 1));
  if (c.num_heads % c.num_kv_heads != 0) {
    r.fail("num_key_value_heads",
           fmt::format("({}) must divide num_attention_heads ({})", c.num_kv_heads, c.num_heads));
  }
  if (!r.has("head_dim") && c.hidden_size % c.num_heads != 0) {
    r.fail("head_dim", "is missing and hidden_size is not a multiple of num_attention_heads");
  }
  c.head_dim = static_cast<int>(r.optional_int("head_dim", c.hidden_size / c.num_heads, 2));
  if (c.head_dim % 2 != 0) r.fail("head_dim", "must be even for rotary embeddings");
  c.max_position_embeddings = r.optional_int("max_position_embeddings", 2048, 1);
  c.rms_norm_eps = r.optional_number("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0)) r.fail("rms_norm_eps", "must be > 0");
  c.rope = parse_rope_config(j, source, c.head_dim, c.max_position_embeddings);
  c.tie_word_embeddings = r.optional_bool("tie_word_embeddings", false);
  c.attention_bias = r.optional_bool("attention_bias", false);
  c.mlp_bias = r.optional_bool("mlp_bias", false);
  c.hidden_act = r.optional_string("hidden_act", "silu");
  parse_sliding_window(j, r, c);
  // v5 writes "dtype", v4 "torch_dtype".
  const std::string dtype_field = r.has("dtype") ? "dtype" : "torch_dtype";
  const std::string dtype_name = r.optional_string(dtype_field.c_str(), "float32");
  const auto dtype = dtype_from_torch_name(dtype_name);
  if (!dtype)
    r.fail(dtype_field,
           fmt::format("'{}' is not supported (float32, bfloat16, float16)", dtype_name));
  c.dtype = *dtype;
  const auto bos = r.id_list("bos_token_id");
  if (!bos.empty()) c.bos_token_id = bos[0];
  c.eos_token_ids = r.id_list("eos_token_id");
  c.json = std::make_shared<const json>(j);
  c.source = source;
  return c;
}

void apply_generation_config(const std::string& json_text, const std::string& source,
                             ModelConfig& config) {
  const json j = parse_json_object(json_text, source);
  ConfigReader r(j, source);
  auto eos = r.id_list("eos_token_id");
  if (!eos.empty()) config.eos_token_ids = std::move(eos);
  const auto bos = r.id_list("bos_token_id");
  if (!bos.empty()) config.bos_token_id = bos[0];
  if (r.has("temperature"))
    config.generation.temperature = static_cast<float>(r.optional_number("temperature", 1.0));
  if (r.has("top_p")) config.generation.top_p = static_cast<float>(r.optional_number("top_p", 1.0));
  if (r.has("top_k")) config.generation.top_k = static_cast<int>(r.optional_int("top_k", 0));
  if (r.has("repetition_penalty")) {
    config.generation.repetition_penalty =
        static_cast<float>(r.optional_number("repetition_penalty", 1.0));
  }
}

ModelConfig load_model_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(model_dir)) {
    throw NotFound(fmt::format("{}: model directory does not exist", model_dir));
  }
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  if (!fs::exists(config_path)) throw NotFound(fmt::format("{}: no such file", config_path));
  ModelConfig config = parse_model_config(read_text_file(config_path), config_path);
  const std::string gen_path = (fs::path(model_dir) / "generation_config.json").string();
  if (fs::exists(gen_path)) apply_generation_config(read_text_file(gen_path), gen_path, config);
  return config;
}

}  // namespace pagoda
