#pragma once
// The one definition of a model family: which tensors its checkpoint holds (the weight table), how
// they group into projections, and how the shared blocks compose into a decoder. Each family file
// in model/arch/ builds a ModelDefinition from config.json; the CPU backend (model/cpu_decoder.cc)
// and the CUDA backend (runtime/cuda/) both build from it and hold no per-architecture names.
//
// A layer is the pre-norm decoder block every supported family shares, with optional pieces:
//
//   x = input_norm(residual)                          attention input: norm + qkv + bias,
//   q, k, v = split(qkv(x)); q, k = q_norm, k_norm     per-head q/k norms, RoPE, cache write
//   q, k = rope(q, k); cache <- k, v
//   a = attention(q, cache)                           scale, soft-cap, sliding window
//   h = o(a); h = post_attention_norm(h)?             output projection (+ Gemma-2's norm)
//   residual += h
//   x = pre_mlp_norm(residual)                        MLP: norm, gate_up, activation, down
//   h = down(act(gate(x)) * up(x)); h = post_mlp_norm(h)?
//   residual += h
//
// and the model is embed (* embed_scale) -> layers -> final_norm -> lm_head (-> soft-cap).
// A backend may fuse blocks (the CUDA backend folds norms, residual adds and RoPE into its small-
// batch GEMVs) but never changes what they compute.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace pagoda {

/// Which dimension of a weight a tensor-parallel rank takes a slice of.
enum class ShardDim : uint8_t {
  kNone,  // replicated on every rank (norms)
  kOut,   // output features (rows of [out, in]): column-parallel qkv, gate_up; vocab of embeddings
  kIn,    // input features (columns): row-parallel o and down (an all-reduce follows)
};

/// One tensor of the checkpoint as the weight table names it.
struct TensorSpec {
  std::string name;
  Shape shape;
  ShardDim shard = ShardDim::kNone;
};

/// An RMSNorm weight: y = x / sqrt(mean(x^2) + eps) * (weight_offset + w). Gemma stores w - 1
/// (weight_offset 1); backends fold the offset into the weight at load.
struct NormDef {
  std::string name;  // checkpoint tensor, e.g. "model.layers.0.input_layernorm.weight"
  int64_t size = 0;
  float weight_offset = 0.0f;
};

/// How a projection's weight is stored in the checkpoint; model/linear.h has one LinearMethod per
/// format, which loads, fuses (and will shard) its tensors and multiplies by them.
enum class WeightFormat : uint8_t {
  kDense,  // W [out, in] in f32, bf16 or f16 (the torch nn.Linear layout)
};

/// A projection y = x W^T (+ b), W: [out, in]. Its output is a list of segments (q, k, v; gate,
/// up), and its weight comes from one or more checkpoint tensors, each covering consecutive
/// segments stacked by rows. Example: Llama's qkv has segments {q, kv, kv} from three sources
/// (q_proj covers segment 0, k_proj 1, v_proj 2); Phi-3's has the same segments from one source
/// (qkv_proj covers 0..2). A tensor-parallel rank takes a slice of each segment.
struct LinearDef {
  struct Source {
    std::string prefix;  // checkpoint name without ".weight" / ".bias"
    int first_segment = 0;
    int num_segments = 1;
  };
  std::string name;                   // for messages: "model.layers.0.self_attn.qkv"
  std::vector<int64_t> out_segments;  // rows of each segment
  int64_t in = 0;
  std::vector<Source> sources;
  bool bias = false;
  ShardDim shard = ShardDim::kOut;
  WeightFormat format = WeightFormat::kDense;

  [[nodiscard]] int64_t out() const;
  /// Rows of a source: the sum of its segments.
  [[nodiscard]] int64_t source_rows(const Source& s) const;
  /// The first row of a source in W.
  [[nodiscard]] int64_t source_offset(const Source& s) const;
};

enum class Activation : uint8_t {
  kSilu,      // silu(gate) * up (Llama, Qwen, Mistral, Phi-3)
  kGeluTanh,  // gelu_pytorch_tanh(gate) * up (Gemma)
};

/// The attention of one layer.
struct AttentionDef {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;      // on q.k (1/sqrt(head_dim), query_pre_attn_scalar, RoPE mscale^2)
  float softcap = 0.0f;    // > 0: scores become softcap * tanh(scores / softcap) (Gemma-2)
  int sliding_window = 0;  // > 0: each query sees only the last sliding_window keys
  std::optional<NormDef> q_norm, k_norm;  // per-head RMSNorm of q and k before RoPE (Qwen3)

  [[nodiscard]] int64_t q_size() const { return int64_t{num_heads} * head_dim; }
  [[nodiscard]] int64_t kv_size() const { return int64_t{num_kv_heads} * head_dim; }
};

/// One decoder layer (the block diagram at the top of this file).
struct LayerDef {
  NormDef input_norm;
  LinearDef qkv;  // segments {q, k, v}
  AttentionDef attention;
  LinearDef o;
  std::optional<NormDef> post_attention_norm;  // of the attention output, before the residual add
  NormDef pre_mlp_norm;
  LinearDef gate_up;  // segments {gate, up}
  Activation activation = Activation::kSilu;
  LinearDef down;
  std::optional<NormDef> post_mlp_norm;  // of the MLP output, before the residual add
};

/// A whole model: the weight table and the composition of its blocks.
struct ModelDefinition {
  std::string architecture;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  std::string embed_name;    // [vocab, hidden]
  float embed_scale = 1.0f;  // the embedding rows are multiplied by this (Gemma: sqrt(hidden))
  bool embed_scale_in_activation_dtype = false;  // Gemma rounds the scale to the activation dtype
  float norm_eps = 1e-6f;                        // every RMSNorm's epsilon
  std::vector<LayerDef> layers;
  NormDef final_norm;
  LinearDef lm_head;                 // [vocab, hidden]
  bool lm_head_tied = false;         // the embedding serves as lm_head when the checkpoint has none
  float final_softcap = 0.0f;        // > 0: logits become softcap * tanh(logits / softcap)
  std::vector<float> rope_inv_freq;  // [head_dim / 2], scaling applied; rotate-half convention

  /// Every checkpoint tensor, in a fixed order (dummy weights draw tensor i from its index).
  [[nodiscard]] std::vector<TensorSpec> tensors() const;
  /// The sliding window every layer shares, or 0 when some layer attends to every key.
  [[nodiscard]] int common_window() const;
  /// Whether each layer is the plain Llama block: no post norms, SiLU, no soft-caps, no weight
  /// offsets, q/k norms allowed. (Backends may keep fusions for this case only.)
  [[nodiscard]] bool is_plain_llama_block() const;
};

}  // namespace pagoda
