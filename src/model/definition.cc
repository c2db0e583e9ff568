#include "model/definition.h"

#include <numeric>

#include "core/status.h"
#include "model/linear.h"

namespace pagoda {

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

std::vector<TensorSpec> ModelDefinition::tensors() const {
  // Embeddings, final norm, lm_head, then per layer its norms, projections and per-head norms (the
  // order of the Llama family's table before definitions existed, so that dummy weights of
  // bias-free models keep their values). A tied lm_head is left out: some tied checkpoints write
  // one anyway, which backends then use.
  std::vector<TensorSpec> out;
  out.push_back({embed_name, Shape{vocab_size, hidden_size}, ShardDim::kOut});
  out.push_back({final_norm.name, Shape{final_norm.size}, ShardDim::kNone});
  if (!lm_head_tied) add_linear(lm_head, out);
  for (const LayerDef& l : layers) {
    add_norm(l.input_norm, out);
    add_norm(l.post_attention_norm, out);
    add_norm(l.pre_mlp_norm, out);
    add_norm(l.post_mlp_norm, out);
    for (const LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) add_linear(*lin, out);
    add_norm(l.attention.q_norm, out);
    add_norm(l.attention.k_norm, out);
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
