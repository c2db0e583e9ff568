// Llama (1, 2, 3.x) and Mistral: the plain pre-norm decoder; attention_bias and mlp_bias come from
// config.json (attention_bias gives q, k, v and o biases).
#include "model/arch/hf_decoder.h"

namespace pagoda {
namespace {

ModelDefinition define_llama(const ModelConfig& c, const DefinitionOptions& options) {
  HfDecoderStyle style;
  style.qkv_bias = style.o_bias = c.attention_bias;
  style.mlp_bias = c.mlp_bias;
  style.activation = activation_named(c, "hidden_act", c.hidden_act);
  return hf_decoder_definition(c, style, options);
}

}  // namespace

void register_llama_family(ArchitectureRegistry& registry) {
  registry.add("LlamaForCausalLM", {define_llama});
  registry.add("MistralForCausalLM", {define_llama});
}

}  // namespace pagoda
