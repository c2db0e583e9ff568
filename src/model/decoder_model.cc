#include "model/decoder_model.h"

#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/status.h"
#include "model/kv_cache_storage.h"
#include "ops/ops.h"

namespace pagoda {
namespace {

std::string layer_name(int layer, const char* suffix) {
  return fmt::format("model.layers.{}.{}", layer, suffix);
}

/// A small tensor (norm weight, bias) converted to fp32 and owned by the model: kernels then only
/// deal with fp32 for them, and they are a negligible fraction of the weights.
struct OwnedF32 {
  Buffer buffer;
  Tensor tensor;
};

OwnedF32 to_f32(const Tensor& t) {
  OwnedF32 out{Buffer(static_cast<size_t>(t.num_elements()) * sizeof(float)), {}};
  float* dst = out.buffer.as<float>();
  const int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::kF32:
        dst[i] = t.as<float>()[i];
        break;
      case DType::kBF16:
        dst[i] = bf16_to_float(t.as<uint16_t>()[i]);
        break;
      case DType::kF16:
        dst[i] = f16_to_float(t.as<uint16_t>()[i]);
        break;
      default:
        PAGODA_CHECK(false, "unexpected dtype {}", dtype_name(t.dtype));
    }
  }
  out.tensor = Tensor{out.buffer.data(), DType::kF32, t.shape};
  return out;
}

struct LayerWeights {
  OwnedF32 input_norm, post_attention_norm;
  Tensor q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
  std::optional<OwnedF32> q_bias, k_bias, v_bias, o_bias, gate_bias, up_bias, down_bias;
  std::optional<OwnedF32> q_norm, k_norm;
};

/// Scratch activations for one forward pass, grown to the largest batch seen.
struct Workspace {
  int64_t capacity = 0;
  Buffer hidden, residual, normed, q, k, v, attn, gate, up, gathered, final_normed;

  void reserve(int64_t tokens, const ModelConfig& c) {
    if (tokens <= capacity) return;
    capacity = std::max<int64_t>(tokens, 2 * capacity);
    auto floats = [&](int64_t per_token) {
      return Buffer(static_cast<size_t>(capacity * per_token) * sizeof(float));
    };
    hidden = floats(c.hidden_size);
    residual = floats(c.hidden_size);
    normed = floats(c.hidden_size);
    q = floats(c.q_size());
    k = floats(c.kv_size());
    v = floats(c.kv_size());
    attn = floats(c.q_size());
    gate = floats(c.intermediate_size);
    up = floats(c.intermediate_size);
    gathered = floats(c.hidden_size);
    final_normed = floats(c.hidden_size);
  }
};

Tensor view2(const Buffer& b, int64_t rows, int64_t cols) {
  return Tensor{b.data(), DType::kF32, Shape{rows, cols}};
}
Tensor view3(const Buffer& b, int64_t a, int64_t rows, int64_t cols) {
  return Tensor{b.data(), DType::kF32, Shape{a, rows, cols}};
}
const Tensor* opt(const std::optional<OwnedF32>& t) { return t ? &t->tensor : nullptr; }

/// The Llama-family decoder over flat varlen batches.
class DecoderModel final : public Model {
 public:
  DecoderModel(const ModelConfig& config, const DecoderVariant& variant, WeightStore weights,
               const OpContext& ctx)
      : config_(config), variant_(variant), weights_(std::move(weights)), ctx_(ctx) {
    bind_weights();
    inv_freq_ = rope_inv_freq(config_.rope, config_.head_dim);
  }

  const ModelConfig& config() const override { return config_; }

  int64_t kv_cache_bytes_per_token() const override {
    return KVCacheStorage::bytes_per_token(config_);
  }

  void init_kv_cache(int64_t num_blocks, int block_size) override {
    kv_.reset();  // free the old cache before allocating the new one
    kv_ = std::make_unique<KVCacheStorage>(config_, num_blocks, block_size);
  }

  void copy_kv_blocks(std::span<const std::pair<int32_t, int32_t>> src_dst) override {
    PAGODA_CHECK(kv_ != nullptr, "copy_kv_blocks before init_kv_cache");
    for (const auto& [src, dst] : src_dst) kv_->copy_block(src, dst);
  }

  std::span<float> forward(const ForwardBatch& batch) override {
    PAGODA_CHECK(kv_ != nullptr, "forward before init_kv_cache");
    KVCacheStorage& kv = *kv_;
    const ModelConfig& c = config_;
    const int64_t T = batch.num_tokens();
    validate(batch, kv);
    if (T == 0) return {};
    ws_.reserve(T, c);
    const Tensor ids{const_cast<int32_t*>(batch.token_ids.data()), DType::kI32, Shape{T}};
    const Tensor positions{const_cast<int32_t*>(batch.positions.data()), DType::kI32, Shape{T}};
    const Tensor slots{const_cast<int64_t*>(batch.slot_mapping.data()), DType::kI64, Shape{T}};
    const Tensor inv_freq{inv_freq_.data(), DType::kF32,
                          Shape{static_cast<int64_t>(inv_freq_.size())}};
    const Tensor hidden = view2(ws_.hidden, T, c.hidden_size);
    const Tensor residual = view2(ws_.residual, T, c.hidden_size);
    const Tensor normed = view2(ws_.normed, T, c.hidden_size);
    const Tensor q = view2(ws_.q, T, c.q_size());
    const Tensor k = view2(ws_.k, T, c.kv_size());
    const Tensor v = view2(ws_.v, T, c.kv_size());
    const Tensor q3 = view3(ws_.q, T, c.num_heads, c.head_dim);
    const Tensor k3 = view3(ws_.k, T, c.num_kv_heads, c.head_dim);
    const Tensor v3 = view3(ws_.v, T, c.num_kv_heads, c.head_dim);
    const Tensor attn = view2(ws_.attn, T, c.q_size());
    const Tensor gate = view2(ws_.gate, T, c.intermediate_size);
    const Tensor up = view2(ws_.up, T, c.intermediate_size);
    const float eps = static_cast<float>(c.rms_norm_eps);

    ops::embedding(ctx_, ids, embed_tokens_, residual);
    for (int l = 0; l < c.num_layers; ++l) {
      const LayerWeights& w = layers_[static_cast<size_t>(l)];
      // hidden holds the previous sublayer's output; the first layer has none to add.
      if (l == 0) {
        ops::rms_norm(ctx_, residual, w.input_norm.tensor, eps, normed);
      } else {
        ops::add_rms_norm(ctx_, residual, hidden, w.input_norm.tensor, eps, normed);
      }
      ops::linear(ctx_, normed, w.q_proj, opt(w.q_bias), q);
      ops::linear(ctx_, normed, w.k_proj, opt(w.k_bias), k);
      ops::linear(ctx_, normed, w.v_proj, opt(w.v_bias), v);
      if (variant_.qk_norm) {
        ops::rms_norm(ctx_, q3, w.q_norm->tensor, eps, q3);
        ops::rms_norm(ctx_, k3, w.k_norm->tensor, eps, k3);
      }
      ops::rope(ctx_, q3, k3, positions, inv_freq);
      ops::reshape_and_cache(ctx_, k3, v3, slots, kv.key_cache(l), kv.value_cache(l), kv.layout());
      cpu::PagedAttentionParams p;
      p.q = q.as<float>();
      p.positions = batch.positions.data();
      p.query_start_loc = batch.query_start_loc.data();
      p.seq_lens = batch.seq_lens.data();
      p.block_tables = batch.block_tables.data();
      p.key_cache = kv.key_cache(l).as<float>();
      p.value_cache = kv.value_cache(l).as<float>();
      p.out = attn.as<float>();
      p.num_tokens = T;
      p.num_seqs = batch.num_seqs();
      p.num_heads = c.num_heads;
      p.max_blocks_per_seq = batch.max_blocks_per_seq;
      p.sliding_window = c.layer_window(l);
      p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      p.layout = kv.layout();
      ops::paged_attention(ctx_, p);
      ops::linear(ctx_, attn, w.o_proj, opt(w.o_bias), hidden);
      ops::add_rms_norm(ctx_, residual, hidden, w.post_attention_norm.tensor, eps, normed);
      ops::linear(ctx_, normed, w.gate_proj, opt(w.gate_bias), gate);
      ops::linear(ctx_, normed, w.up_proj, opt(w.up_bias), up);
      ops::silu_and_mul(ctx_, gate, up, gate);
      ops::linear(ctx_, gate, w.down_proj, opt(w.down_bias), hidden);
    }
    // Only the rows whose logits are wanted go through the final norm and the LM head.
    const int64_t L = static_cast<int64_t>(batch.logits_indices.size());
    if (L == 0) return {};
    const Tensor gathered = view2(ws_.gathered, L, c.hidden_size);
    const Tensor gathered_hidden = view2(ws_.normed, L, c.hidden_size);
    for (int64_t i = 0; i < L; ++i) {
      const int64_t row = batch.logits_indices[static_cast<size_t>(i)];
      std::memcpy(gathered.as<float>() + i * c.hidden_size,
                  residual.as<float>() + row * c.hidden_size,
                  static_cast<size_t>(c.hidden_size) * sizeof(float));
      std::memcpy(gathered_hidden.as<float>() + i * c.hidden_size,
                  hidden.as<float>() + row * c.hidden_size,
                  static_cast<size_t>(c.hidden_size) * sizeof(float));
    }
    const Tensor final_normed = view2(ws_.final_normed, L, c.hidden_size);
    ops::add_rms_norm(ctx_, gathered, gathered_hidden, final_norm_.tensor, eps, final_normed);
    logits_.resize(static_cast<size_t>(L * c.vocab_size));
    const Tensor out{logits_.data(), DType::kF32, Shape{L, c.vocab_size}};
    ops::linear(ctx_, final_normed, lm_head_, nullptr, out);
    return logits_;
  }

 private:
  void validate(const ForwardBatch& b, const KVCacheStorage& kv) const {
    const int64_t T = b.num_tokens();
    const int S = b.num_seqs();
    PAGODA_CHECK(static_cast<int64_t>(b.positions.size()) == T &&
                     static_cast<int64_t>(b.slot_mapping.size()) == T,
                 "positions/slot_mapping sizes do not match {} tokens", T);
    PAGODA_CHECK(static_cast<int>(b.query_start_loc.size()) == S + 1 && b.query_start_loc[0] == 0 &&
                     b.query_start_loc[static_cast<size_t>(S)] == T,
                 "query_start_loc does not cover the {} tokens", T);
    PAGODA_CHECK(static_cast<int64_t>(b.block_tables.size()) ==
                     static_cast<int64_t>(S) * b.max_blocks_per_seq,
                 "block_tables size");
    for (int s = 0; s < S; ++s) {
      const int32_t begin = b.query_start_loc[static_cast<size_t>(s)];
      const int32_t end = b.query_start_loc[static_cast<size_t>(s) + 1];
      PAGODA_CHECK(begin <= end, "query_start_loc not increasing");
      const int32_t len = b.seq_lens[static_cast<size_t>(s)];
      PAGODA_CHECK(len >= end - begin &&
                       len <= static_cast<int64_t>(b.max_blocks_per_seq) * kv.layout().block_size,
                   "seq_len {} of sequence {} does not fit its block table", len, s);
      for (int32_t t = begin; t < end; ++t) {
        PAGODA_CHECK(
            b.positions[static_cast<size_t>(t)] >= 0 && b.positions[static_cast<size_t>(t)] < len,
            "position {} of token {} outside its sequence of length {}",
            b.positions[static_cast<size_t>(t)], t, len);
      }
      const int32_t used_blocks = (len + kv.layout().block_size - 1) / kv.layout().block_size;
      for (int32_t j = 0; j < used_blocks; ++j) {
        const int32_t block =
            b.block_tables[static_cast<size_t>(s) * static_cast<size_t>(b.max_blocks_per_seq) +
                           static_cast<size_t>(j)];
        PAGODA_CHECK(block >= 0 && block < kv.layout().num_blocks, "block {} outside the pool",
                     block);
      }
    }
    for (int32_t row : b.logits_indices)
      PAGODA_CHECK(row >= 0 && row < T, "logits index {} of {} tokens", row, T);
  }

  /// Fetches a tensor and checks its shape and dtype, naming the checkpoint file on mismatch.
  Tensor matrix(const std::string& name, const Shape& shape) {
    const Tensor& t = weights_.get(name);
    if (!(t.shape == shape)) {
      throw InvalidArgument(fmt::format("{}: tensor '{}' has shape {}, expected {}",
                                        weights_.source_of(name), name, t.shape.to_string(),
                                        shape.to_string()));
    }
    if (!is_float_weight_dtype(t.dtype)) {
      throw InvalidArgument(
          fmt::format("{}: tensor '{}' has dtype {}, expected float32, bfloat16 or float16",
                      weights_.source_of(name), name, dtype_name(t.dtype)));
    }
    return t;
  }
  OwnedF32 vector(const std::string& name, int64_t size) {
    return to_f32(matrix(name, Shape{size}));
  }

  void bind_weights() {
    const ModelConfig& c = config_;
    embed_tokens_ = matrix("model.embed_tokens.weight", Shape{c.vocab_size, c.hidden_size});
    final_norm_ = vector("model.norm.weight", c.hidden_size);
    // Tied checkpoints usually omit lm_head.weight; some write it anyway.
    if (c.tie_word_embeddings && !weights_.contains("lm_head.weight")) {
      lm_head_ = embed_tokens_;
    } else {
      lm_head_ = matrix("lm_head.weight", Shape{c.vocab_size, c.hidden_size});
    }
    for (int l = 0; l < c.num_layers; ++l) {
      LayerWeights w;
      auto name = [&](const char* suffix) { return layer_name(l, suffix); };
      w.input_norm = vector(name("input_layernorm.weight"), c.hidden_size);
      w.post_attention_norm = vector(name("post_attention_layernorm.weight"), c.hidden_size);
      w.q_proj = matrix(name("self_attn.q_proj.weight"), Shape{c.q_size(), c.hidden_size});
      w.k_proj = matrix(name("self_attn.k_proj.weight"), Shape{c.kv_size(), c.hidden_size});
      w.v_proj = matrix(name("self_attn.v_proj.weight"), Shape{c.kv_size(), c.hidden_size});
      w.o_proj = matrix(name("self_attn.o_proj.weight"), Shape{c.hidden_size, c.q_size()});
      w.gate_proj = matrix(name("mlp.gate_proj.weight"), Shape{c.intermediate_size, c.hidden_size});
      w.up_proj = matrix(name("mlp.up_proj.weight"), Shape{c.intermediate_size, c.hidden_size});
      w.down_proj = matrix(name("mlp.down_proj.weight"), Shape{c.hidden_size, c.intermediate_size});
      if (variant_.qkv_bias) {
        w.q_bias = vector(name("self_attn.q_proj.bias"), c.q_size());
        w.k_bias = vector(name("self_attn.k_proj.bias"), c.kv_size());
        w.v_bias = vector(name("self_attn.v_proj.bias"), c.kv_size());
      }
      if (variant_.o_bias) w.o_bias = vector(name("self_attn.o_proj.bias"), c.hidden_size);
      if (c.mlp_bias) {
        w.gate_bias = vector(name("mlp.gate_proj.bias"), c.intermediate_size);
        w.up_bias = vector(name("mlp.up_proj.bias"), c.intermediate_size);
        w.down_bias = vector(name("mlp.down_proj.bias"), c.hidden_size);
      }
      if (variant_.qk_norm) {
        w.q_norm = vector(name("self_attn.q_norm.weight"), c.head_dim);
        w.k_norm = vector(name("self_attn.k_norm.weight"), c.head_dim);
      }
      layers_.push_back(std::move(w));
    }
  }

  ModelConfig config_;
  DecoderVariant variant_;
  WeightStore weights_;
  OpContext ctx_;
  Tensor embed_tokens_, lm_head_;
  OwnedF32 final_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_;
  Workspace ws_;
  std::unique_ptr<KVCacheStorage> kv_;
  std::vector<float> logits_;
};

}  // namespace

std::vector<ArchitectureEntry::TensorSpec> decoder_tensor_specs(const ModelConfig& c,
                                                                const DecoderVariant& variant) {
  std::vector<ArchitectureEntry::TensorSpec> specs;
  auto add = [&](std::string name, Shape shape) { specs.push_back({std::move(name), shape}); };
  add("model.embed_tokens.weight", Shape{c.vocab_size, c.hidden_size});
  add("model.norm.weight", Shape{c.hidden_size});
  if (!c.tie_word_embeddings) add("lm_head.weight", Shape{c.vocab_size, c.hidden_size});
  for (int l = 0; l < c.num_layers; ++l) {
    auto name = [&](const char* suffix) { return layer_name(l, suffix); };
    add(name("input_layernorm.weight"), Shape{c.hidden_size});
    add(name("post_attention_layernorm.weight"), Shape{c.hidden_size});
    add(name("self_attn.q_proj.weight"), Shape{c.q_size(), c.hidden_size});
    add(name("self_attn.k_proj.weight"), Shape{c.kv_size(), c.hidden_size});
    add(name("self_attn.v_proj.weight"), Shape{c.kv_size(), c.hidden_size});
    add(name("self_attn.o_proj.weight"), Shape{c.hidden_size, c.q_size()});
    add(name("mlp.gate_proj.weight"), Shape{c.intermediate_size, c.hidden_size});
    add(name("mlp.up_proj.weight"), Shape{c.intermediate_size, c.hidden_size});
    add(name("mlp.down_proj.weight"), Shape{c.hidden_size, c.intermediate_size});
    if (variant.qkv_bias) {
      add(name("self_attn.q_proj.bias"), Shape{c.q_size()});
      add(name("self_attn.k_proj.bias"), Shape{c.kv_size()});
      add(name("self_attn.v_proj.bias"), Shape{c.kv_size()});
    }
    if (variant.o_bias) add(name("self_attn.o_proj.bias"), Shape{c.hidden_size});
    if (c.mlp_bias) {
      add(name("mlp.gate_proj.bias"), Shape{c.intermediate_size});
      add(name("mlp.up_proj.bias"), Shape{c.intermediate_size});
      add(name("mlp.down_proj.bias"), Shape{c.hidden_size});
    }
    if (variant.qk_norm) {
      add(name("self_attn.q_norm.weight"), Shape{c.head_dim});
      add(name("self_attn.k_norm.weight"), Shape{c.head_dim});
    }
  }
  return specs;
}

std::unique_ptr<Model> build_decoder_model(const ModelConfig& config, const DecoderVariant& variant,
                                           WeightStore weights, const OpContext& ctx) {
  return std::make_unique<DecoderModel>(config, variant, std::move(weights), ctx);
}

ArchitectureEntry decoder_architecture(
    std::function<DecoderVariant(const ModelConfig&)> config_variant) {
  ArchitectureEntry entry;
  entry.expected_tensors = [config_variant](const ModelConfig& c) {
    return decoder_tensor_specs(c, config_variant(c));
  };
  entry.build = [config_variant](const ModelConfig& c, WeightStore weights, const OpContext& ctx) {
    return build_decoder_model(c, config_variant(c), std::move(weights), ctx);
  };
  return entry;
}

}  // namespace pagoda
