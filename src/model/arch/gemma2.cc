// Gemma-2 (Gemma2ForCausalLM). On the Llama tensor layout (hf_decoder) it changes:
//  - embeddings multiplied by sqrt(hidden_size), rounded to the activation dtype as transformers
//    rounds it;
//  - four RMSNorms per layer, each y = norm(x) * (1 + w): input_layernorm, post_attention_layernorm
//    (of the attention output, before the residual add), pre_feedforward_layernorm and
//    post_feedforward_layernorm (of the MLP output); the final norm is (1 + w) too;
//  - GeGLU: gelu_pytorch_tanh(gate) * up (hidden_activation);
//  - attention scale query_pre_attn_scalar^-1/2 instead of head_dim^-1/2, scores soft-capped at
//    attn_logit_softcapping, logits at final_logit_softcapping (c * tanh(x / c));
//  - sliding windows on alternate layers: layer_types when config.json has it, else the even
//    layers (transformers' rule for Gemma-2);
//  - tied embeddings unless the config says otherwise.
// Fields config.json leaves out take Gemma2Config's defaults.
#include <cmath>

#include "model/arch/hf_decoder.h"
#include "model/config_reader.h"

namespace pagoda {
namespace {

/// A soft-cap field: its value, 0 when the config sets it to null (off), `fallback` when absent.
float softcap(const ModelConfig& c, const char* key, double fallback) {
  const nlohmann::json& j = *c.json;
  if (j.contains(key) && j.at(key).is_null()) return 0.0f;
  const double v = ConfigReader(j, c.source).optional_number(key, fallback);
  if (!(v >= 0)) ConfigReader(j, c.source).fail(key, "must be >= 0 or null");
  return static_cast<float>(v);
}

ModelDefinition define_gemma2(const ModelConfig& c, const DefinitionOptions& options) {
  const nlohmann::json& j = *c.json;
  const ConfigReader r(j, c.source);
  HfDecoderStyle style;
  style.qkv_bias = style.o_bias = c.attention_bias;
  // transformers' Gemma-2 reads hidden_activation; the checkpoints carry hidden_act too.
  const char* act_field = r.has("hidden_activation") ? "hidden_activation" : "hidden_act";
  style.activation =
      activation_named(c, act_field, r.optional_string(act_field, "gelu_pytorch_tanh"));
  ModelDefinition d = hf_decoder_definition(c, style, options);

  const double scalar = r.optional_number("query_pre_attn_scalar", 256.0);
  if (!(scalar > 0)) r.fail("query_pre_attn_scalar", "must be > 0");
  const RopeTables rope = rope_tables(c.rope, c.head_dim, options.max_model_len);
  const float scale = static_cast<float>(static_cast<double>(rope.attention_factor) *
                                         rope.attention_factor / std::sqrt(scalar));
  const float attn_softcap = softcap(c, "attn_logit_softcapping", 50.0);
  // The window: sliding_window (Gemma2Config's 4096 when absent); none at or beyond
  // max_position_embeddings, where it limits nothing.
  int window = c.sliding_window;
  if (!j.contains("sliding_window")) window = 4096 < c.max_position_embeddings ? 4096 : 0;
  const bool typed = r.has("layer_types");  // validated by parse_model_config
  const int64_t h = c.hidden_size;
  for (int l = 0; l < c.num_layers; ++l) {
    LayerDef& layer = d.layers[static_cast<size_t>(l)];
    const std::string p = fmt::format("model.layers.{}.", l);
    layer.input_norm.weight_offset = 1.0f;
    layer.post_attention_norm = NormDef{p + "post_attention_layernorm.weight", h, 1.0f};
    layer.pre_mlp_norm = NormDef{p + "pre_feedforward_layernorm.weight", h, 1.0f};
    layer.post_mlp_norm = NormDef{p + "post_feedforward_layernorm.weight", h, 1.0f};
    AttentionDef& a = layer.attention;
    a.scale = scale;
    a.softcap = attn_softcap;
    const bool sliding =
        typed ? j.at("layer_types")[static_cast<size_t>(l)] == "sliding_attention" : l % 2 == 0;
    a.sliding_window = sliding ? window : 0;
  }
  d.final_norm.weight_offset = 1.0f;
  d.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(h)));
  d.embed_scale_in_activation_dtype = true;
  d.final_softcap = softcap(c, "final_logit_softcapping", 30.0);
  d.lm_head_tied = r.optional_bool("tie_word_embeddings", true);
  return d;
}

}  // namespace

void register_gemma_family(ArchitectureRegistry& registry) {
  registry.add("Gemma2ForCausalLM", {define_gemma2});
}

}  // namespace pagoda
