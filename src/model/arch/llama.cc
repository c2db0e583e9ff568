// Llama (1, 2, 3.x) and Mistral: the plain decoder; attention_bias / mlp_bias come from
// config.json.
#include "model/decoder_model.h"

namespace pagoda {

void register_llama_family(ArchitectureRegistry& registry) {
  auto variant = [](const ModelConfig& c) {
    return DecoderVariant{
        .qkv_bias = c.attention_bias, .o_bias = c.attention_bias, .qk_norm = false};
  };
  registry.add("LlamaForCausalLM", decoder_architecture(variant));
  registry.add("MistralForCausalLM", decoder_architecture(variant));
}

}  // namespace pagoda
