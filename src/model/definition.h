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
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace pagoda {

/// Which dimension of a weight a tensor-parallel rank takes a slice of.
enum class ShardDim : uint8_t {
  kNone,  // replicated on every rank (norms)
  kOut,   // output features (rows of [out, in]): column-parallel qkv, gate_up; vocab of embeddings
  kIn,    // input features (columns): row-parallel o and down (an all-reduce follows)
};

/// How --load-format dummy draws a tensor whose dtype the weight format fixes (TensorSpec::dtype);
/// tensors in the checkpoint's float dtype keep the recipe of model/dummy_weights.h.
enum class DummyFill : uint8_t {
  kUniform,     // value * u, u uniform in [-1, 1), converted to the dtype (rounded, saturated)
  kRandomBits,  // every bit random (packed 4-bit codes: any nibble is a valid code)
  kConstant,    // every element = value (scales; zero points as an int32 bit pattern)
  kGroupIndex,  // element i = i / value (GPTQ's g_idx of group size value)
};

/// One tensor of the checkpoint as the weight table names it.
struct TensorSpec {
  TensorSpec() = default;
  TensorSpec(std::string name_, Shape shape_, ShardDim shard_ = ShardDim::kNone)
      : name(std::move(name_)), shape(shape_), shard(shard_) {}
  TensorSpec(std::string name_, Shape shape_, ShardDim shard_, DType dtype_, DummyFill fill_,
             double fill_value_)
      : name(std::move(name_)),
        shape(shape_),
        shard(shard_),
        dtype(dtype_),
        fill(fill_),
        fill_value(fill_value_) {}

  std::string name;
  Shape shape;
  ShardDim shard = ShardDim::kNone;
  /// The dtype a quantized format requires (packed int32, fp8, uint8, fp32 scales); nullopt: any
  /// float dtype, the checkpoint's (dense weights, norms, biases, 16-bit scales).
  std::optional<DType> dtype;
  DummyFill fill = DummyFill::kUniform;  // for tensors with a dtype
  double fill_value = 0;
};

/// An RMSNorm weight: y = x / sqrt(mean(x^2) + eps) * (weight_offset + w). Gemma stores w - 1
/// (weight_offset 1); backends fold the offset into the weight at load.
struct NormDef {
  std::string name;  // checkpoint tensor, e.g. "model.layers.0.input_layernorm.weight"
  int64_t size = 0;
  float weight_offset = 0.0f;
};

/// How a projection's weight is stored in the checkpoint; model/linear.h has one LinearMethod per
/// format, which loads, fuses (and will shard) its tensors and multiplies by them. The tensors of
/// each format are listed where its method lives (model/quant/).
enum class WeightFormat : uint8_t {
  kDense,      // W [out, in] in f32, bf16 or f16 (the torch nn.Linear layout)
  kFp8,        // W8A8 float8_e4m3fn weight [out, in] + weight_scale (compressed-tensors, fp8)
  kFp8Online,  // dense tensors quantized to float8_e4m3fn at load (--quantization fp8)
  kInt8,       // W8A8 int8 weight [out, in] + weight_scale (compressed-tensors int-quantized)
  kGptq,       // qweight/qzeros/scales/g_idx, int4 or int8 packed in int32 (AutoGPTQ, GPTQModel)
  kAwq,        // qweight/qzeros/scales, int4 packed in int32 along out (AutoAWQ GEMM)
  kNvfp4,      // float4_e2m1 pairs in uint8 + float8_e4m3 scales per 16 + a global scale
  kMxfp4,      // float4_e2m1 pairs in uint8 + float8_e8m0 scales per 32 (OCP MX)
};

/// The name of a format in messages: "dense", "fp8", "gptq", ...
[[nodiscard]] const char* weight_format_name(WeightFormat format);

/// Where a quantized weight's scales apply.
enum class ScaleStrategy : uint8_t {
  kTensor,   // one scale per checkpoint tensor (per source of a fused projection)
  kChannel,  // one per output row
  kGroup,    // one per output row and group of group_size input features
  kBlock,    // one per [block_out, block_in] tile of W
};

/// How a W8A8 format quantizes its input x [m, in] before the product.
enum class ActivationQuant : uint8_t {
  kNone,          // weight-only: x stays fp32
  kStaticTensor,  // x / input_scale (the checkpoint's, the largest of a fused projection's)
  kDynamicToken,  // per row: scale = max|x_row| / qmax
  kDynamicGroup,  // per row and group of block_in features (block-wise FP8)
};

/// The parameters of a quantized weight format (model/quant/quant_config.h fills them from
/// config.json's quantization_config or --quantization).
struct QuantParams {
  std::string method;  // vLLM's name of the quantization method, for messages: "gptq", ...
  int bits = 0;        // weight bits: 8 (fp8, int8), 4 (GPTQ/AWQ int4, FP4), GPTQ also 8
  ScaleStrategy weight_scales = ScaleStrategy::kChannel;
  int64_t group_size = 0;  // kGroup: input features per scale (GPTQ's -1 becomes `in`)
  int64_t block_out = 0;   // kBlock: the tile of one scale
  int64_t block_in = 0;
  bool symmetric = true;           // GPTQ/AWQ/int8: no zero points (GPTQ stores 2^(bits-1) anyway)
  bool desc_act = false;           // GPTQ act-order: g_idx is a permutation of the groups
  bool gptq_zero_plus_one = true;  // GPTQ v1 checkpoints store zero - 1 (checkpoint_format gptq)
  ActivationQuant activations = ActivationQuant::kNone;

  bool operator==(const QuantParams&) const = default;
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
  QuantParams quant;  // for formats other than kDense

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
  /// The checkpoint module of the attention ("model.layers.0.self_attn"), under which a quantized
  /// checkpoint stores the layer's KV cache scales (kv_scale_names).
  std::string module;

  [[nodiscard]] int64_t q_size() const { return int64_t{num_heads} * head_dim; }
  [[nodiscard]] int64_t kv_size() const { return int64_t{num_kv_heads} * head_dim; }
};

/// The checkpoint names one layer's K (which = 'k') or V ('v') cache scale may have, in the order
/// they are looked up, as vLLM reads them: "<module>.k_scale" (compressed-tensors, llm-compressor)
/// and "<module>.k_proj.k_scale" (ModelOpt). Each is a scalar (shape [] or [1]) float tensor.
[[nodiscard]] std::vector<std::string> kv_scale_names(const AttentionDef& attention, char which);

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

/// An EAGLE draft head (model/arch/eagle.cc): one decoder layer whose input comes from the target's
/// hidden states, predicting the target's next tokens. Worked shapes for a target of hidden 4096
/// (Llama-3.1-8B) and T tokens:
///  - EAGLE-1: x = fc(concat(embed(token) [T, 4096], h [T, 4096])) [T, 4096], h the target's
///    final-normed hidden state; the layer without its input norm; output g = the residual stream
///    after the layer (no final norm), logits = the target's lm_head(g).
///  - EAGLE-3: x = fc(concat(h_a, h_b, h_c) [T, 3 * 4096]) [T, 4096] from three target layers (or
///    x = g, the head's own previous output, when drafting further); the layer's attention input
///    is concat(input_norm(embed(token)), hidden_norm(x)) [T, 8192] and x its residual; output g =
///    the residual stream after the layer, logits = lm_head(norm(g)) over draft_vocab_size tokens,
///    draft id i meaning target id i + d2t[i].
struct EagleHeadDef {
  int version = 1;  // 1 or 3
  LinearDef fc;     // [hidden, 2 hidden] (EAGLE-1) or [hidden, 3 target hidden] (EAGLE-3)
  std::optional<NormDef> hidden_norm;  // EAGLE-3: midlayer.hidden_norm
  int64_t draft_vocab_size = 0;        // lm_head's rows (EAGLE-3 may be < vocab_size)
  std::string d2t_name;                // EAGLE-3 with draft_vocab_size < vocab_size: [draft_vocab]
  /// The target's hidden states the head reads (StepPlan::hidden_layers' convention): EAGLE-1 the
  /// final-normed output (the target's layer count), EAGLE-3 three residual streams.
  std::vector<int32_t> target_layers;
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
  /// The KV cache dtype the checkpoint's quantization declares scales for (each layer's
  /// self_attn.k_scale / v_scale); nullopt for none. The cache itself follows --kv-cache-dtype.
  std::optional<DType> checkpoint_kv_cache_dtype;
  /// What --kv-cache-dtype auto becomes for this checkpoint: ModelOpt's kv_cache_quant_algo FP8
  /// makes it fp8, as vLLM's resolve_kv_cache_dtype_string does; nullopt: the backend's dtype
  /// (compressed-tensors' kv_cache_scheme alone does not change auto in vLLM either).
  std::optional<DType> auto_kv_cache_dtype;
  /// An EAGLE draft head: forward() then needs ForwardBatch::input_hidden.
  std::optional<EagleHeadDef> eagle;

  /// Every checkpoint tensor, in a fixed order (dummy weights draw tensor i from its index).
  [[nodiscard]] std::vector<TensorSpec> tensors() const;
  /// The weight formats of the projections for logs: "gptq 4-bit group 128 (28 layers), lm_head
  /// dense".
  [[nodiscard]] std::string weight_summary() const;
  /// Whether some projection has a format other than kDense.
  [[nodiscard]] bool quantized() const;
  /// The sliding window every layer shares, or 0 when some layer attends to every key.
  [[nodiscard]] int common_window() const;
  /// Whether each layer is the plain Llama block: no post norms, SiLU, no soft-caps, no weight
  /// offsets, q/k norms allowed. (Backends may keep fusions for this case only.)
  [[nodiscard]] bool is_plain_llama_block() const;
};

}  // namespace pagoda
