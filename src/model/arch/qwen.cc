// Qwen2 (q/k/v biases, no o bias) and Qwen3 (no biases by default, per-head q/k RMSNorm, explicit
// head_dim).
#include "model/decoder_model.h"

namespace pagoda {

void register_qwen_family(ArchitectureRegistry& registry) {
  registry.add("Qwen2ForCausalLM", decoder_architecture([](const ModelConfig&) {
                 return DecoderVariant{.qkv_bias = true, .o_bias = false, .qk_norm = false};
               }));
  registry.add("Qwen3ForCausalLM", decoder_architecture([](const ModelConfig& c) {
                 return DecoderVariant{
                     .qkv_bias = c.attention_bias, .o_bias = c.attention_bias, .qk_norm = true};
               }));
}

}  // namespace pagoda
