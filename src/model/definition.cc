#include "model/definition.h"

#include <map>
#include <numeric>

#include <fmt/format.h>

#include "core/status.h"
#include "model/linear.h"

namespace pagoda {

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kDense:
      return "dense";
    case WeightFormat::kFp8:
      return "fp8";
    case WeightFormat::kFp8Online:
      return "fp8 (quantized at load)";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kGptq:
      return "gptq";
    case WeightFormat::kAwq:
      return "awq";
    case WeightFormat::kNvfp4:
      return "nvfp4";
    case WeightFormat::kMxfp4:
      return "mxfp4";
  }
  return "unknown";
}

int64_t LinearDef::out() const {
  return std::accumulate(out_segments.begin(), out_segments.end(), int64_t{0});
}

int64_t LinearDef::source_rows(const Source& s) const {
  PAGODA_CHECK(s.first_segment >= 0 && s.num_segments >= 1 &&
                   s.first_segment + s.num_segments <= static_cast<int>(out_segments.size()),
               "{}: source {} covers segments outside [0, {})", name, s.prefix,
               out_segments.size());
  int64_t rows = 0;
  for (int i = s.first_segment; i < s.first_segment + s.num_segments; ++i)
    rows += out_segments[static_cast<size_t>(i)];
  return rows;
}

int64_t LinearDef::source_offset(const Source& s) const {
  int64_t offset = 0;
  for (int i = 0; i < s.first_segment; ++i) offset += out_segments[static_cast<size_t>(i)];
  return offset;
}

namespace {

void add_norm(const std::optional<NormDef>& n, std::vector<TensorSpec>& out) {
  if (n) out.push_back({n->name, Shape{n->size}, ShardDim::kNone});
}

void add_linear(const LinearDef& l, std::vector<TensorSpec>& out) {
  for (TensorSpec& t : linear_method(l.format).tensors(l)) out.push_back(std::move(t));
}

}  // namespace

std::vector<std::string> kv_scale_names(const AttentionDef& attention, char which) {
  PAGODA_CHECK(which == 'k' || which == 'v', "kv_scale_names: '{}'", which);
  const std::string scale = fmt::format("{}_scale", which);
  return {fmt::format("{}.{}", attention.module, scale),
          fmt::format("{}.{}_proj.{}", attention.module, which, scale)};
}

std::vector<TensorSpec> ModelDefinition::tensors() const {
  // Embeddings, final norm, lm_head, then per layer its norms, projections and per-head norms (the
  // order of the Llama family's table before definitions existed, so that dummy weights of
  // bias-free models keep their values). A tied lm_head is left out: some tied checkpoints write
  // one anyway, which backends then use.
  std::vector<TensorSpec> out;
  out.push_back({embed_name, Shape{vocab_size, hidden_size}, ShardDim::kOut});
  const bool eagle1 = eagle && eagle->version == 1;  // no final norm, no first input norm
  if (!eagle1) out.push_back({final_norm.name, Shape{final_norm.size}, ShardDim::kNone});
  if (!lm_head_tied) add_linear(lm_head, out);
  if (eagle) {
    add_linear(eagle->fc, out);
    add_norm(eagle->hidden_norm, out);
    if (!eagle->d2t_name.empty()) {
      // Zero offsets for dummy weights: draft id i is target id i.
      out.push_back({eagle->d2t_name, Shape{eagle->draft_vocab_size}, ShardDim::kNone, DType::kI64,
                     DummyFill::kConstant, 0});
    }
  }
  for (const LayerDef& l : layers) {
    if (!eagle1) add_norm(l.input_norm, out);
    add_norm(l.post_attention_norm, out);
    add_norm(l.pre_mlp_norm, out);
    add_norm(l.post_mlp_norm, out);
    for (const LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) add_linear(*lin, out);
    add_norm(l.attention.q_norm, out);
    add_norm(l.attention.k_norm, out);
  }
  return out;
}

namespace {

std::string describe_linear(const LinearDef& l) {
  if (l.format == WeightFormat::kDense) return "dense";
  const QuantParams& q = l.quant;
  // "gptq 4-bit", "fp8 (compressed-tensors) 8-bit": the method when it is not the format's name.
  const std::string name = weight_format_name(l.format);
  std::string d = name.rfind(q.method, 0) == 0
                      ? fmt::format("{} {}-bit", name, q.bits)
                      : fmt::format("{} ({}) {}-bit", name, q.method, q.bits);
  switch (q.weight_scales) {
    case ScaleStrategy::kTensor:
      d += " per-tensor";
      break;
    case ScaleStrategy::kChannel:
      d += " per-channel";
      break;
    case ScaleStrategy::kGroup:
      d += fmt::format(" group {}", q.group_size);
      break;
    case ScaleStrategy::kBlock:
      d += fmt::format(" block {}x{}", q.block_out, q.block_in);
      break;
  }
  if (l.format == WeightFormat::kGptq) {
    d += q.symmetric ? " sym" : " asym";
    if (q.desc_act) d += " act-order";
  }
  switch (q.activations) {
    case ActivationQuant::kNone:
      break;
    case ActivationQuant::kStaticTensor:
      d += ", static activations";
      break;
    case ActivationQuant::kDynamicToken:
      d += ", dynamic per-token activations";
      break;
    case ActivationQuant::kDynamicGroup:
      d += fmt::format(", dynamic activations per {}", q.block_in);
      break;
  }
  return d;
}

}  // namespace

bool ModelDefinition::quantized() const {
  if (!lm_head_tied && lm_head.format != WeightFormat::kDense) return true;
  for (const LayerDef& l : layers)
    for (const LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down})
      if (lin->format != WeightFormat::kDense) return true;
  return false;
}

std::string ModelDefinition::weight_summary() const {
  std::map<std::string, int> counts;
  for (const LayerDef& l : layers)
    for (const LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down})
      ++counts[describe_linear(*lin)];
  std::string out;
  for (const auto& [what, n] : counts)
    out += fmt::format("{}{} ({} projections)", out.empty() ? "" : ", ", what, n);
  out += fmt::format(", lm_head {}", lm_head_tied ? "tied" : describe_linear(lm_head));
  if (checkpoint_kv_cache_dtype) {
    out += fmt::format(", KV cache scales for {} in the checkpoint",
                       dtype_name(*checkpoint_kv_cache_dtype));
  }
  return out;
}

int ModelDefinition::common_window() const {
  int window = -1;
  for (const LayerDef& l : layers) {
    if (l.attention.sliding_window <= 0) return 0;
    if (window >= 0 && window != l.attention.sliding_window) return 0;
    window = l.attention.sliding_window;
  }
  return window < 0 ? 0 : window;
}

bool ModelDefinition::is_plain_llama_block() const {
  if (embed_scale != 1.0f || final_softcap > 0 || final_norm.weight_offset != 0) return false;
  for (const LayerDef& l : layers) {
    if (l.post_attention_norm || l.post_mlp_norm || l.activation != Activation::kSilu ||
        l.attention.softcap > 0 || l.input_norm.weight_offset != 0 ||
        l.pre_mlp_norm.weight_offset != 0)
      return false;
  }
  return true;
}

}  // namespace pagoda
