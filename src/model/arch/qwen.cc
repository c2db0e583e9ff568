// Qwen2 (q/k/v biases always, no o bias) and Qwen3 (biases only with attention_bias, per-head q/k
// RMSNorm, an explicit head_dim).
#include "model/arch/hf_decoder.h"

namespace pagoda {
namespace {

ModelDefinition define_qwen2(const ModelConfig& c, const DefinitionOptions& options) {
  HfDecoderStyle style;
  style.qkv_bias = true;
  style.mlp_bias = c.mlp_bias;
  style.activation = activation_named(c, "hidden_act", c.hidden_act);
  return hf_decoder_definition(c, style, options);
}

ModelDefinition define_qwen3(const ModelConfig& c, const DefinitionOptions& options) {
  HfDecoderStyle style;
  style.qkv_bias = style.o_bias = c.attention_bias;
  style.mlp_bias = c.mlp_bias;
  style.qk_norm = true;
  style.activation = activation_named(c, "hidden_act", c.hidden_act);
  return hf_decoder_definition(c, style, options);
}

}  // namespace

void register_qwen_family(ArchitectureRegistry& registry) {
  registry.add("Qwen2ForCausalLM", {define_qwen2});
  registry.add("Qwen3ForCausalLM", {define_qwen3});
}

}  // namespace pagoda
