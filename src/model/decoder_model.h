#pragma once
// The Llama-family decoder (RMSNorm, rotary attention with GQA, gated SiLU MLP) that Llama,
// Mistral, Qwen2 and Qwen3 share; the families differ only in the DecoderVariant flags.
#include <memory>
#include <vector>

#include "model/loader/safetensors.h"
#include "model/model.h"
#include "model/registry.h"
#include "ops/op_context.h"

namespace pagoda {

/// What distinguishes one Llama-family architecture from another.
struct DecoderVariant {
  bool qkv_bias =
      false;             // q/k/v projections carry biases (Qwen2 always; Llama with attention_bias)
  bool o_bias = false;   // o_proj carries a bias (Llama with attention_bias)
  bool qk_norm = false;  // per-head RMSNorm of q and k before RoPE (Qwen3)
};

/// The tensors a Llama-family checkpoint must hold, with their shapes.
[[nodiscard]] std::vector<ArchitectureEntry::TensorSpec> decoder_tensor_specs(
    const ModelConfig& config, const DecoderVariant& variant);

/// Builds the decoder after checking every tensor's presence, shape and dtype.
[[nodiscard]] std::unique_ptr<Model> build_decoder_model(const ModelConfig& config,
                                                         const DecoderVariant& variant,
                                                         WeightStore weights, const OpContext& ctx);

/// An ArchitectureEntry for a Llama-family variant; config_variant may adjust flags per config.
[[nodiscard]] ArchitectureEntry decoder_architecture(
    std::function<DecoderVariant(const ModelConfig&)> config_variant);

}  // namespace pagoda
