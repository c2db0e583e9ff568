#include "model/arch/hf_decoder.h"

#include <cmath>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda {
namespace {

LinearDef linear(std::string name, std::vector<int64_t> segments, int64_t in,
                 std::vector<LinearDef::Source> sources, bool bias, ShardDim shard) {
  LinearDef l;
  l.name = std::move(name);
  l.out_segments = std::move(segments);
  l.in = in;
  l.sources = std::move(sources);
  l.bias = bias;
  l.shard = shard;
  return l;
}

}  // namespace

Activation activation_named(const ModelConfig& config, const std::string& field,
                            const std::string& value) {
  if (value == "silu" || value == "swish") return Activation::kSilu;
  if (value == "gelu_pytorch_tanh" || value == "gelu_new" || value == "gelu_tanh")
    return Activation::kGeluTanh;
  throw InvalidArgument(
      fmt::format("{}: field '{}': '{}' is not supported (silu, gelu_pytorch_tanh)", config.source,
                  field, value));
}

ModelDefinition hf_decoder_definition(const ModelConfig& c, const HfDecoderStyle& style,
                                      const DefinitionOptions& options) {
  ModelDefinition d;
  d.architecture = c.architecture;
  d.vocab_size = c.vocab_size;
  d.hidden_size = c.hidden_size;
  d.embed_name = "model.embed_tokens.weight";
  d.norm_eps = static_cast<float>(c.rms_norm_eps);
  d.final_norm = NormDef{"model.norm.weight", c.hidden_size, 0.0f};
  d.lm_head =
      linear("lm_head", {c.vocab_size}, c.hidden_size, {{"lm_head", 0, 1}}, false, ShardDim::kOut);
  d.lm_head_tied = c.tie_word_embeddings;
  const RopeTables rope = rope_tables(c.rope, c.head_dim, options.max_model_len);
  d.rope_inv_freq = rope.inv_freq;
  const float scale =
      rope.attention_factor * rope.attention_factor / std::sqrt(static_cast<float>(c.head_dim));

  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    LayerDef layer;
    layer.input_norm = NormDef{p + "input_layernorm.weight", h, 0.0f};
    layer.pre_mlp_norm = NormDef{p + "post_attention_layernorm.weight", h, 0.0f};
    std::vector<LinearDef::Source> qkv_sources =
        style.fused_qkv ? std::vector<LinearDef::Source>{{p + "self_attn.qkv_proj", 0, 3}}
                        : std::vector<LinearDef::Source>{{p + "self_attn.q_proj", 0, 1},
                                                         {p + "self_attn.k_proj", 1, 1},
                                                         {p + "self_attn.v_proj", 2, 1}};
    layer.qkv = linear(p + "self_attn.qkv", {q, kv, kv}, h, std::move(qkv_sources), style.qkv_bias,
                       ShardDim::kOut);
    layer.o = linear(p + "self_attn.o_proj", {h}, q, {{p + "self_attn.o_proj", 0, 1}}, style.o_bias,
                     ShardDim::kIn);
    std::vector<LinearDef::Source> gate_up_sources =
        style.fused_gate_up ? std::vector<LinearDef::Source>{{p + "mlp.gate_up_proj", 0, 2}}
                            : std::vector<LinearDef::Source>{{p + "mlp.gate_proj", 0, 1},
                                                             {p + "mlp.up_proj", 1, 1}};
    layer.gate_up = linear(p + "mlp.gate_up", {inter, inter}, h, std::move(gate_up_sources),
                           style.mlp_bias, ShardDim::kOut);
    layer.down = linear(p + "mlp.down_proj", {h}, inter, {{p + "mlp.down_proj", 0, 1}},
                        style.mlp_bias, ShardDim::kIn);
    layer.activation = style.activation;
    AttentionDef& a = layer.attention;
    a.num_heads = c.num_heads;
    a.num_kv_heads = c.num_kv_heads;
    a.head_dim = c.head_dim;
    a.scale = scale;
    a.sliding_window = c.layer_window(l);
    if (style.qk_norm) {
      a.q_norm = NormDef{p + "self_attn.q_norm.weight", c.head_dim, 0.0f};
      a.k_norm = NormDef{p + "self_attn.k_norm.weight", c.head_dim, 0.0f};
    }
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace pagoda
