// Phi-3 (Phi3ForCausalLM: Phi-3 and Phi-3.5 mini/medium, Phi-4 with full rotary embeddings): the
// Llama block with fused checkpoint tensors, self_attn.qkv_proj ([q; k; v] by rows) and
// mlp.gate_up_proj ([gate; up]), no biases, and LongRoPE ("longrope", formerly "su") in the
// 128k-context variants (model/rope.h). A sliding_window shorter than max_position_embeddings
// (Phi-3-mini-4k's 2047) applies to every layer, as transformers applies it.
#include "model/arch/hf_decoder.h"

namespace pagoda {
namespace {

ModelDefinition define_phi3(const ModelConfig& c, const DefinitionOptions& options) {
  HfDecoderStyle style;
  style.fused_qkv = true;
  style.fused_gate_up = true;
  style.activation = activation_named(c, "hidden_act", c.hidden_act);
  return hf_decoder_definition(c, style, options);
}

}  // namespace

void register_phi3_family(ArchitectureRegistry& registry) {
  registry.add("Phi3ForCausalLM", {define_phi3});
}

}  // namespace pagoda
