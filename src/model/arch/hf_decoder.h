#pragma once
// The pieces of a Hugging Face pre-norm decoder checkpoint that the families of model/arch/ share:
// Llama's tensor names ("model.layers.N.self_attn.q_proj", ...), with the choices a family makes
// (biases, per-head q/k norms, fused checkpoint tensors, the MLP activation) as flags.
#include <string>

#include "model/config.h"
#include "model/definition.h"
#include "model/registry.h"

namespace pagoda {

/// A family's choices; the defaults are Llama's.
struct HfDecoderStyle {
  bool qkv_bias = false;       // q/k/v projections carry biases
  bool o_bias = false;         // o_proj carries a bias
  bool mlp_bias = false;       // gate/up/down carry biases
  bool qk_norm = false;        // self_attn.q_norm / k_norm, per head, before RoPE (Qwen3)
  bool fused_qkv = false;      // the checkpoint holds one self_attn.qkv_proj (Phi-3)
  bool fused_gate_up = false;  // the checkpoint holds one mlp.gate_up_proj (Phi-3)
  Activation activation = Activation::kSilu;
};

/// The definition of a Llama-style checkpoint: embeddings, the layers with the config's sliding
/// windows, the final norm, lm_head (tied when the config says so), RoPE with its attention factor
/// folded into the attention scale 1 / sqrt(head_dim).
[[nodiscard]] ModelDefinition hf_decoder_definition(const ModelConfig& config,
                                                    const HfDecoderStyle& style,
                                                    const DefinitionOptions& options);

/// The activation config.json names in `field` (hidden_act, hidden_activation), or InvalidArgument
/// naming the field: silu/swish, or the tanh approximation of GELU (gelu_pytorch_tanh, gelu_new).
[[nodiscard]] Activation activation_named(const ModelConfig& config, const std::string& field,
                                          const std::string& value);

}  // namespace pagoda
