#include "model/cpu_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <spdlog/spdlog.h>

#include "core/half.h"
#include "core/status.h"
#include "model/context_parallel.h"
#include "model/kv_cache_scales.h"
#include "model/kv_cache_storage.h"
#include "model/linear.h"
#include "ops/ops.h"

namespace pagoda {
namespace {

/// A norm weight as the CPU kernels take it: fp32, owned, with the definition's weight offset
/// folded in (Gemma's 1 + w), so every norm is y = x / rms(x) * w.
struct NormWeight {
  Buffer buffer;
  Tensor tensor;
};

NormWeight norm_weight(const WeightStore& weights, const NormDef& def) {
  const Tensor& t = checked_float_tensor(weights, def.name, Shape{def.size});
  NormWeight out{Buffer(static_cast<size_t>(def.size) * sizeof(float)), {}};
  float* dst = out.buffer.as<float>();
  for (int64_t i = 0; i < def.size; ++i) {
    float w = 0;
    switch (t.dtype) {
      case DType::kF32:
        w = t.as<float>()[i];
        break;
      case DType::kBF16:
        w = bf16_to_float(t.as<uint16_t>()[i]);
        break;
      default:
        w = f16_to_float(t.as<uint16_t>()[i]);
        break;
    }
    dst[i] = def.weight_offset + w;
  }
  out.tensor = Tensor{out.buffer.data(), DType::kF32, Shape{def.size}};
  return out;
}

std::optional<NormWeight> optional_norm(const WeightStore& w, const std::optional<NormDef>& def) {
  if (!def) return std::nullopt;
  return norm_weight(w, *def);
}

/// One layer's weights, bound as the definition's LayerDef names them.
struct LayerWeights {
  NormWeight input_norm, pre_mlp_norm;
  std::optional<NormWeight> post_attention_norm, post_mlp_norm, q_norm, k_norm;
  std::unique_ptr<CpuLinear> qkv, o, gate_up, down;
};

/// Scratch activations for one forward pass, grown to the largest batch seen; every buffer is
/// [capacity, features] fp32.
struct Workspace {
  int64_t capacity = 0;
  Buffer residual, hidden, normed, qkv, q, k, v, attn, gate_up, gate, up, gathered, final_normed;
  // EAGLE heads only: eagle_cat [capacity, max(2 hidden, fc.in)] (the concatenated inputs of fc
  // and of EAGLE-3's attention), eagle_tmp [capacity, hidden].
  Buffer eagle_cat, eagle_tmp;

  void reserve(int64_t tokens, const ModelDefinition& d) {
    if (tokens <= capacity) return;
    capacity = std::max<int64_t>(tokens, 2 * capacity);
    int64_t q_size = 0, kv_size = 0, qkv_size = 0, inter = 0;
    for (const LayerDef& l : d.layers) {
      q_size = std::max(q_size, l.attention.q_size());
      kv_size = std::max(kv_size, l.attention.kv_size());
      qkv_size = std::max(qkv_size, l.qkv.out());
      inter = std::max(inter, l.gate_up.out_segments[0]);
    }
    auto floats = [&](int64_t per_token) {
      return Buffer(static_cast<size_t>(capacity * per_token) * sizeof(float));
    };
    const int64_t h = d.hidden_size;
    residual = floats(h);
    hidden = floats(h);
    normed = floats(h);
    qkv = floats(qkv_size);
    q = floats(q_size);
    k = floats(kv_size);
    v = floats(kv_size);
    attn = floats(q_size);
    gate_up = floats(2 * inter);
    gate = floats(inter);
    up = floats(inter);
    gathered = floats(h);
    final_normed = floats(h);
    if (d.eagle) {
      eagle_cat = floats(std::max(2 * h, d.eagle->fc.in));
      eagle_tmp = floats(h);
    }
  }
};

Tensor view2(const Buffer& b, int64_t rows, int64_t cols) {
  return Tensor{b.data(), DType::kF32, Shape{rows, cols}};
}
Tensor view3(const Buffer& b, int64_t a, int64_t rows, int64_t cols) {
  return Tensor{b.data(), DType::kF32, Shape{a, rows, cols}};
}

/// Copies columns [first, first + cols) of src [rows, src_cols] into dst [rows, cols].
void copy_columns(const Tensor& src, int64_t first, const Tensor& dst) {
  const int64_t rows = dst.shape[0], cols = dst.shape[1], src_cols = src.shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst.as<float>() + r * cols, src.as<float>() + r * src_cols + first,
                static_cast<size_t>(cols) * sizeof(float));
  }
}

/// A ModelDefinition on the CPU. The residual stream lives in `residual`; a sublayer's output
/// waits in `hidden` until the next norm adds it (ops::add_rms_norm), so each residual add is
/// fused with the norm that follows it.
class CpuDecoderModel final : public Model {
 public:
  CpuDecoderModel(const ModelConfig& config, ModelDefinition definition, WeightStore weights,
                  const OpContext& ctx, const KVCacheOptions& kv_cache, const TensorParallel& tp)
      : config_(config),
        def_(std::move(definition)),
        weights_(std::move(weights)),
        ctx_(ctx),
        tp_(tp),
        vocab_(vocab_shard(def_.vocab_size, tp.rank, tp.world)) {
    PAGODA_CHECK(tp_.world == 1 || (tp_.comm != nullptr && tp_.comm->world_size() == tp_.world &&
                                    tp_.comm->rank() == tp_.rank),
                 "tensor-parallel rank {} of {} without its communicator", tp_.rank, tp_.world);
    const DType kv_dtype = resolve_cpu_kv_cache_dtype(def_, kv_cache);
    bind_weights();
    const AttentionDef& a = def_.layers.at(0).attention;
    for (const LayerDef& l : def_.layers) {
      PAGODA_CHECK(l.attention.num_kv_heads == a.num_kv_heads && l.attention.head_dim == a.head_dim,
                   "{}: layers with different KV shapes are not supported", def_.architecture);
    }
    kv_spec_ = kv::KVCacheSpec{static_cast<int>(def_.layers.size()), a.num_kv_heads, a.head_dim,
                               kv_dtype, kv::KVLayout::kTokenMajor};
    if (tp_.dcp > 1) {  // the cache holds the group's KV heads, 1 of every dcp positions
      cp_ = std::make_unique<ContextParallelAttention>(
          plan_context_parallel(config_.num_heads, config_.num_kv_heads, tp_.rank, tp_.world,
                                tp_.dcp),
          tp_.comm, a.head_dim);
      kv_spec_.num_kv_heads = cp_->plan().group_kv_heads;
      kv_spec_.decode_context_parallel = tp_.dcp;
    }
    bind_kv_scales(kv_cache);
  }

  const ModelConfig& config() const override { return config_; }
  const ModelDefinition& definition() const override { return def_; }
  const kv::KVCacheSpec& kv_cache_spec() const override { return kv_spec_; }

  /// block_size: the engine's; with -dcp D a physical block holds block_size / D of its tokens.
  void init_kv_cache(int64_t num_blocks, int block_size) override {
    PAGODA_CHECK(block_size % tp_.dcp == 0, "KV blocks of {} tokens with -dcp {}", block_size,
                 tp_.dcp);
    kv_.reset();  // free the old cache before allocating the new one
    kv_ = std::make_unique<KVCacheStorage>(kv_spec_, num_blocks, block_size / tp_.dcp);
    engine_block_size_ = block_size;
  }

  void copy_kv_blocks(std::span<const std::pair<int32_t, int32_t>> src_dst) override {
    PAGODA_CHECK(kv_ != nullptr, "copy_kv_blocks before init_kv_cache");
    for (const auto& [src, dst] : src_dst) kv_->copy_block(src, dst);
  }
  void export_kv_block(int32_t block, std::span<std::byte> out) override {
    PAGODA_CHECK(kv_ != nullptr, "export_kv_block before init_kv_cache");
    kv_->export_block(block, out);
  }
  void import_kv_block(int32_t block, std::span<const std::byte> in) override {
    PAGODA_CHECK(kv_ != nullptr, "import_kv_block before init_kv_cache");
    kv_->import_block(block, in);
  }

  std::span<float> forward(const ForwardBatch& batch) override;
  std::span<float> hidden_states() override { return hidden_states_; }

 private:
  void bind_weights();
  void bind_eagle();
  /// kv_scales_ from the checkpoint, or 1.0 until the first forward computes them.
  void bind_kv_scales(const KVCacheOptions& kv_cache);
  /// normed = norm(residual (+ hidden, when a sublayer's output is pending)).
  void norm_residual(const NormWeight& w, int64_t T);
  /// The attention block of layer l over its input x [T, qkv.in]: qkv projection, q/k norms,
  /// RoPE, cache write, attention; leaves the attention output in ws_.attn.
  void attention(int l, const ForwardBatch& batch, const Tensor& x);
  /// An EAGLE head's first steps (definition.h, EagleHeadDef), with embed(token) in ws_.normed:
  /// sets the residual stream x from batch.input_hidden and returns the layer's attention input.
  [[nodiscard]] Tensor eagle_input(const ForwardBatch& batch);
  /// Fills logits_ [L, vocab] from the LM head's input [L, hidden]; an EAGLE-3 head's rows of
  /// draft_vocab_size ids are scattered to their target ids (d2t), the other ids -inf.
  void lm_head_logits(const Tensor& x);
  /// -tp N: the sum over the ranks of a row-parallel projection's partial output [T, hidden].
  void all_reduce(const Tensor& partial) {
    if (tp_.world > 1) tp_.comm->all_reduce_sum(partial.data, partial.num_elements(), DType::kF32);
  }
  /// The embedding of batch's tokens into residual [T, hidden]: with -tp N each rank holds the
  /// rows of vocab_, a token outside them embeds as zeros, and the all-reduce adds the one rank's
  /// row to zeros (exact).
  void embed(const ForwardBatch& batch, const Tensor& residual);
  /// logits_ [L, vocab] = final_normed [L, hidden] times the LM head; with -tp N each rank's
  /// [L, vocab_.rows] is all-gathered (the layout in the definition).
  void lm_head(const Tensor& final_normed, int64_t L);  // (not for EAGLE heads: -tp 1 only)
  /// Copies the residual stream (with the pending sublayer output added) to hidden_states_ for
  /// each batch.hidden_layers entry equal to `layer`.
  void keep_hidden(const ForwardBatch& batch, int layer);
  /// After the last layer: the final norm of every token for the hidden_layers entries equal to
  /// the layer count (EAGLE-1's input: what the LM head reads).
  void keep_final_normed(const ForwardBatch& batch);

  ModelConfig config_;
  ModelDefinition def_;
  WeightStore weights_;
  OpContext ctx_;
  TensorParallel tp_;
  VocabShard vocab_;  // this rank's embedding and LM head rows (all of them with one rank)
  kv::KVCacheSpec kv_spec_;
  Tensor embed_tokens_, lm_head_table_;
  std::unique_ptr<CpuLinear> lm_head_;  // null: tied (lm_head_table_ is the embedding)
  NormWeight final_norm_;
  std::vector<LayerWeights> layers_;
  Workspace ws_;
  bool pending_ = false;  // ws_.hidden holds a sublayer output not yet added to the residual
  std::unique_ptr<KVCacheStorage> kv_;
  int engine_block_size_ = 0;                     // the engine's block (kv_'s times tp_.dcp)
  std::unique_ptr<ContextParallelAttention> cp_;  // -dcp D > 1
  std::vector<cpu::KVScales> kv_scales_;          // [layers]: of an fp8 / int8 cache, else 1.0
  bool calculate_kv_scales_ = false;  // the next forward that writes K/V sets kv_scales_
  std::vector<float> logits_;
  // -tp N: [L, vocab_.stride] this rank's logits (padded), [world, L, vocab_.stride] everyone's;
  // [T] token ids local to vocab_.
  std::vector<float> local_logits_, gathered_logits_;
  std::vector<int32_t> local_ids_;
  std::vector<float> hidden_states_;  // [hidden_layers, T, hidden]
  // EAGLE heads: fc, EAGLE-3's hidden_norm, and its draft-to-target ids [draft_vocab_size]
  // (i + d2t[i]; empty when the head predicts the whole vocabulary).
  std::unique_ptr<CpuLinear> eagle_fc_;
  std::optional<NormWeight> eagle_hidden_norm_;
  std::vector<int32_t> draft_to_target_;
  std::vector<float> head_out_;  // [L, draft_vocab_size] before the scatter
};

void CpuDecoderModel::bind_weights() {
  const ModelDefinition& d = def_;
  embed_tokens_ = checked_float_tensor(weights_, d.embed_name, Shape{vocab_.rows, d.hidden_size});
  const bool eagle1 = d.eagle && d.eagle->version == 1;  // no final norm, no first input norm
  if (!eagle1) final_norm_ = norm_weight(weights_, d.final_norm);
  if (d.eagle) bind_eagle();
  const LinearMethod& head_method = linear_method(d.lm_head.format);
  // Tied checkpoints usually omit lm_head.weight; some write it anyway.
  const bool head_present = weights_.contains(head_method.tensors(d.lm_head).at(0).name);
  if (!d.lm_head_tied || head_present) {
    lm_head_ = head_method.bind_cpu(d.lm_head, weights_);
  } else {
    lm_head_table_ = embed_tokens_;
  }
  for (const LayerDef& l : d.layers) {
    LayerWeights w;
    if (!eagle1) w.input_norm = norm_weight(weights_, l.input_norm);
    w.pre_mlp_norm = norm_weight(weights_, l.pre_mlp_norm);
    w.post_attention_norm = optional_norm(weights_, l.post_attention_norm);
    w.post_mlp_norm = optional_norm(weights_, l.post_mlp_norm);
    w.q_norm = optional_norm(weights_, l.attention.q_norm);
    w.k_norm = optional_norm(weights_, l.attention.k_norm);
    w.qkv = linear_method(l.qkv.format).bind_cpu(l.qkv, weights_);
    w.o = linear_method(l.o.format).bind_cpu(l.o, weights_);
    w.gate_up = linear_method(l.gate_up.format).bind_cpu(l.gate_up, weights_);
    w.down = linear_method(l.down.format).bind_cpu(l.down, weights_);
    layers_.push_back(std::move(w));
  }
}

void CpuDecoderModel::bind_eagle() {
  const EagleHeadDef& e = *def_.eagle;
  eagle_fc_ = linear_method(e.fc.format).bind_cpu(e.fc, weights_);
  eagle_hidden_norm_ = optional_norm(weights_, e.hidden_norm);
  if (e.d2t_name.empty()) return;
  // d2t holds offsets: draft id i is target id i + d2t[i] (EAGLE-3's draft vocabularies).
  const Tensor& t = weights_.get(e.d2t_name);
  if (t.dtype != DType::kI64 || t.shape != Shape{e.draft_vocab_size}) {
    throw InvalidArgument(fmt::format("{}: tensor '{}' must be I64 [{}]",
                                      weights_.source_of(e.d2t_name), e.d2t_name,
                                      e.draft_vocab_size));
  }
  draft_to_target_.resize(static_cast<size_t>(e.draft_vocab_size));
  for (int64_t i = 0; i < e.draft_vocab_size; ++i) {
    const int64_t target = i + t.as<int64_t>()[i];
    if (target < 0 || target >= def_.vocab_size) {
      throw InvalidArgument(fmt::format("{}: {}[{}] maps draft id {} to {}, outside the vocabulary",
                                        weights_.source_of(e.d2t_name), e.d2t_name, i, i, target));
    }
    draft_to_target_[static_cast<size_t>(i)] = static_cast<int32_t>(target);
  }
}

void CpuDecoderModel::bind_kv_scales(const KVCacheOptions& kv_cache) {
  KVScaleSource source;
  kv_scales_ =
      read_kv_cache_scales(def_, weights_, kv_spec_.dtype, kv_cache.calculate_scales, &source);
  calculate_kv_scales_ = source.calculated;
  const std::string dtype = kv::kv_cache_dtype_name(kv_spec_.dtype);
  if (!kv::kv_cache_dtype_scaled(kv_spec_.dtype)) {
    if (def_.checkpoint_kv_cache_dtype) {
      spdlog::info(
          "KV cache {}: the checkpoint's {} KV scales are not used (--kv-cache-dtype fp8 "
          "uses them)",
          dtype, kv::kv_cache_dtype_name(*def_.checkpoint_kv_cache_dtype));
    }
    return;
  }
  const int layers = static_cast<int>(kv_scales_.size());
  if (source.calculated) {
    spdlog::info("KV cache {}: k/v scales from the first forward's K/V (--calculate-kv-scales)",
                 dtype);
  } else if (source.from_checkpoint == layers) {
    spdlog::info("KV cache {}: k/v scales of {} layers from the checkpoint", dtype, layers);
  } else {
    spdlog::warn("KV cache {}: k/v scale 1.0 on {} of {} layers (none in the checkpoint){}", dtype,
                 layers - source.from_checkpoint, layers,
                 kv_spec_.dtype == DType::kI8
                     ? "; int8 codes are then whole numbers: pass --calculate-kv-scales"
                     : "");
  }
}

void CpuDecoderModel::norm_residual(const NormWeight& w, int64_t T) {
  const Tensor residual = view2(ws_.residual, T, def_.hidden_size);
  const Tensor normed = view2(ws_.normed, T, def_.hidden_size);
  if (pending_) {
    ops::add_rms_norm(ctx_, residual, view2(ws_.hidden, T, def_.hidden_size), w.tensor,
                      def_.norm_eps, normed);
  } else {
    ops::rms_norm(ctx_, residual, w.tensor, def_.norm_eps, normed);
  }
  pending_ = false;
}

void CpuDecoderModel::attention(int l, const ForwardBatch& batch, const Tensor& x) {
  const LayerDef& def = def_.layers[static_cast<size_t>(l)];
  const LayerWeights& w = layers_[static_cast<size_t>(l)];
  const AttentionDef& a = def.attention;
  const int64_t T = batch.num_tokens();
  const Tensor qkv = view2(ws_.qkv, T, def.qkv.out());
  w.qkv->apply(ctx_, x, qkv);
  // qkv [T, q + 2 kv] -> q [T, heads, head_dim], k and v [T, kv_heads, head_dim].
  copy_columns(qkv, 0, view2(ws_.q, T, a.q_size()));
  copy_columns(qkv, a.q_size(), view2(ws_.k, T, a.kv_size()));
  copy_columns(qkv, a.q_size() + a.kv_size(), view2(ws_.v, T, a.kv_size()));
  const Tensor q3 = view3(ws_.q, T, a.num_heads, a.head_dim);
  const Tensor k3 = view3(ws_.k, T, a.num_kv_heads, a.head_dim);
  const Tensor v3 = view3(ws_.v, T, a.num_kv_heads, a.head_dim);
  if (w.q_norm) ops::rms_norm(ctx_, q3, w.q_norm->tensor, def_.norm_eps, q3);
  if (w.k_norm) ops::rms_norm(ctx_, k3, w.k_norm->tensor, def_.norm_eps, k3);
  const Tensor positions{const_cast<int32_t*>(batch.positions.data()), DType::kI32, Shape{T}};
  const Tensor inv_freq{const_cast<float*>(def_.rope_inv_freq.data()), DType::kF32,
                        Shape{static_cast<int64_t>(def_.rope_inv_freq.size())}};
  ops::rope(ctx_, q3, k3, positions, inv_freq);
  // -dcp D: the group's new K/V (and queries) from its members; each token's row goes to the
  // member its position picks (model/context_parallel.h).
  if (cp_) cp_->gather(q3.as<float>(), k3.as<float>(), v3.as<float>(), T);
  const Tensor k_new = cp_ ? cp_->group_k() : k3, v_new = cp_ ? cp_->group_v() : v3;
  const Tensor slots =
      cp_ ? cp_->local_slots(batch.slot_mapping, engine_block_size_)
          : Tensor{const_cast<int64_t*>(batch.slot_mapping.data()), DType::kI64, Shape{T}};
  cpu::KVScales& scales = kv_scales_[static_cast<size_t>(l)];
  if (calculate_kv_scales_) {
    scales = calculated_kv_scales(k_new.as<float>(), v_new.as<float>(), k_new.num_elements(),
                                  kv_spec_.dtype);
  }
  ops::reshape_and_cache(ctx_, k_new, v_new, slots, kv_->key_cache(l), kv_->value_cache(l),
                         kv_->layout(), scales);
  cpu::PagedAttentionParams p;
  p.q = ws_.q.as<float>();
  p.positions = batch.positions.data();
  p.query_start_loc = batch.query_start_loc.data();
  p.seq_lens = batch.seq_lens.data();
  p.block_tables = batch.block_tables.data();
  p.key_cache = kv_->key_cache(l).data;
  p.value_cache = kv_->value_cache(l).data;
  p.out = ws_.attn.as<float>();
  p.num_tokens = T;
  p.num_seqs = batch.num_seqs();
  p.num_heads = a.num_heads;
  p.max_blocks_per_seq = batch.max_blocks_per_seq;
  p.sliding_window = a.sliding_window;
  p.scale = a.scale;
  p.softcap = a.softcap;
  p.layout = kv_->layout();
  p.scales = scales;
  if (cp_) {
    cp_->attend(ctx_, p, ws_.attn.as<float>());  // partials over the rank's positions, merged
  } else {
    ops::paged_attention(ctx_, p);
  }
}

Tensor CpuDecoderModel::eagle_input(const ForwardBatch& batch) {
  const EagleHeadDef& e = *def_.eagle;
  const int64_t T = batch.num_tokens(), h = def_.hidden_size, width = batch.input_hidden_width;
  // Hidden states on a device are a GPU head's input (device_hidden_states() is nullopt here).
  PAGODA_CHECK(batch.input_hidden_device == nullptr,
               "EAGLE head on the CPU: input hidden states on a device");
  PAGODA_CHECK(width > 0 && batch.input_hidden.size() == static_cast<size_t>(T * width),
               "EAGLE head: input_hidden of {} floats for {} tokens of width {}",
               batch.input_hidden.size(), T, width);
  const Tensor embeds = view2(ws_.normed, T, h);
  const Tensor residual = view2(ws_.residual, T, h);
  const float* in = batch.input_hidden.data();
  if (e.version == 1) {
    // x = fc([embed | h]): row r of the concatenation is embeds[r] then in[r], [T, 2h].
    PAGODA_CHECK(width == h, "EAGLE-1 head: input hidden width {} for hidden {}", width, h);
    const Tensor cat = view2(ws_.eagle_cat, T, 2 * h);
    for (int64_t r = 0; r < T; ++r) {
      std::memcpy(cat.as<float>() + r * 2 * h, embeds.as<float>() + r * h,
                  static_cast<size_t>(h) * sizeof(float));
      std::memcpy(cat.as<float>() + r * 2 * h + h, in + r * h,
                  static_cast<size_t>(h) * sizeof(float));
    }
    eagle_fc_->apply(ctx_, cat, residual);
    return residual;  // the layer's input norm is left out
  }
  // EAGLE-3: x = fc(three target layers) [T, 3 target hidden], or the head's own output [T, h].
  if (width == e.fc.in) {
    eagle_fc_->apply(ctx_, Tensor{const_cast<float*>(in), DType::kF32, Shape{T, width}}, residual);
  } else {
    PAGODA_CHECK(width == h, "EAGLE-3 head: input hidden width {} (fc {} or hidden {})", width,
                 e.fc.in, h);
    std::memcpy(residual.as<float>(), in, static_cast<size_t>(T * h) * sizeof(float));
  }
  // Attention input [T, 2h]: row r is input_norm(embeds[r]) then hidden_norm(x[r]).
  const Tensor normed_embeds = view2(ws_.eagle_tmp, T, h);
  const Tensor normed_x = view2(ws_.hidden, T, h);
  ops::rms_norm(ctx_, embeds, layers_[0].input_norm.tensor, def_.norm_eps, normed_embeds);
  ops::rms_norm(ctx_, residual, eagle_hidden_norm_->tensor, def_.norm_eps, normed_x);
  const Tensor cat = view2(ws_.eagle_cat, T, 2 * h);
  for (int64_t r = 0; r < T; ++r) {
    std::memcpy(cat.as<float>() + r * 2 * h, normed_embeds.as<float>() + r * h,
                static_cast<size_t>(h) * sizeof(float));
    std::memcpy(cat.as<float>() + r * 2 * h + h, normed_x.as<float>() + r * h,
                static_cast<size_t>(h) * sizeof(float));
  }
  return cat;
}

void CpuDecoderModel::lm_head_logits(const Tensor& x) {
  const int64_t L = x.shape[0];
  const int64_t rows = def_.lm_head.out();
  const bool scatter = !draft_to_target_.empty();
  std::vector<float>& out_rows = scatter ? head_out_ : logits_;
  out_rows.resize(static_cast<size_t>(L * rows));
  const Tensor out{out_rows.data(), DType::kF32, Shape{L, rows}};
  if (lm_head_) {
    lm_head_->apply(ctx_, x, out);
  } else {
    ops::linear(ctx_, x, lm_head_table_, nullptr, out);
  }
  if (!scatter) return;
  // Example: draft vocabulary 3 with d2t [0, 1, 5] over a vocabulary of 8: draft row (a, b, c)
  // becomes (a, b, -inf, -inf, -inf, c, -inf, -inf).
  logits_.assign(static_cast<size_t>(L * def_.vocab_size), -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < rows; ++j) {
      logits_[static_cast<size_t>(i * def_.vocab_size + draft_to_target_[static_cast<size_t>(j)])] =
          head_out_[static_cast<size_t>(i * rows + j)];
    }
  }
}

void CpuDecoderModel::keep_hidden(const ForwardBatch& batch, int layer) {
  const int64_t T = batch.num_tokens(), h = def_.hidden_size;
  for (size_t i = 0; i < batch.hidden_layers.size(); ++i) {
    if (batch.hidden_layers[i] != layer) continue;
    float* dst = hidden_states_.data() + static_cast<int64_t>(i) * T * h;
    const float* r = ws_.residual.as<float>();
    const float* x = ws_.hidden.as<float>();
    for (int64_t e = 0; e < T * h; ++e) dst[e] = pending_ ? r[e] + x[e] : r[e];
  }
}

void CpuDecoderModel::keep_final_normed(const ForwardBatch& batch) {
  const int64_t T = batch.num_tokens(), h = def_.hidden_size;
  const auto num_layers = static_cast<int32_t>(def_.layers.size());
  for (size_t i = 0; i < batch.hidden_layers.size(); ++i) {
    if (batch.hidden_layers[i] != num_layers) continue;
    const Tensor dst{hidden_states_.data() + static_cast<int64_t>(i) * T * h, DType::kF32,
                     Shape{T, h}};
    const Tensor residual = view2(ws_.residual, T, h);
    if (pending_) {
      // add_rms_norm adds into the residual: a copy keeps the stream for the logits rows.
      const Tensor copy = view2(ws_.final_normed, T, h);
      std::memcpy(copy.as<float>(), residual.as<float>(),
                  static_cast<size_t>(T * h) * sizeof(float));
      ops::add_rms_norm(ctx_, copy, view2(ws_.hidden, T, h), final_norm_.tensor, def_.norm_eps,
                        dst);
    } else {
      ops::rms_norm(ctx_, residual, final_norm_.tensor, def_.norm_eps, dst);
    }
  }
}

std::span<float> CpuDecoderModel::forward(const ForwardBatch& batch) {
  PAGODA_CHECK(kv_ != nullptr, "forward before init_kv_cache");
  const ModelDefinition& d = def_;
  const int64_t T = batch.num_tokens();
  validate_forward_batch(batch, kv_->layout().num_blocks, engine_block_size_);
  if (T == 0) return {};
  ws_.reserve(T, d);
  const int64_t h = d.hidden_size;
  const Tensor residual = view2(ws_.residual, T, h);
  const Tensor hidden = view2(ws_.hidden, T, h);
  // An EAGLE head keeps embed(token) apart (in ws_.normed): its residual stream comes from fc.
  const Tensor embedded = d.eagle ? view2(ws_.normed, T, h) : residual;
  embed(batch, embedded);
  if (d.embed_scale != 1.0f) ops::scale(ctx_, embedded, d.embed_scale);
  pending_ = false;
  const Tensor eagle_x = d.eagle ? eagle_input(batch) : Tensor{};
  const auto num_layers = static_cast<int>(d.layers.size());
  for (const int32_t l : batch.hidden_layers) {
    // num_layers: the final-normed output (EAGLE-1's input).
    PAGODA_CHECK(l >= -1 && l <= num_layers, "hidden layer {} of {}", l, num_layers);
  }
  hidden_states_.resize(batch.hidden_layers.size() * static_cast<size_t>(T * h));
  keep_hidden(batch, -1);
  for (size_t l = 0; l < d.layers.size(); ++l) {
    const LayerDef& def = d.layers[l];
    const LayerWeights& w = layers_[l];
    if (d.eagle && l == 0) {
      attention(0, batch, eagle_x);
    } else {
      norm_residual(w.input_norm, T);
      attention(static_cast<int>(l), batch, view2(ws_.normed, T, h));
    }
    w.o->apply(ctx_, view2(ws_.attn, T, def.attention.q_size()), hidden);
    all_reduce(hidden);
    if (w.post_attention_norm)
      ops::rms_norm(ctx_, hidden, w.post_attention_norm->tensor, d.norm_eps, hidden);
    pending_ = true;
    norm_residual(w.pre_mlp_norm, T);
    const int64_t inter = def.gate_up.out_segments[0];
    const Tensor gate_up = view2(ws_.gate_up, T, 2 * inter);
    w.gate_up->apply(ctx_, view2(ws_.normed, T, h), gate_up);
    const Tensor gate = view2(ws_.gate, T, inter), up = view2(ws_.up, T, inter);
    copy_columns(gate_up, 0, gate);
    copy_columns(gate_up, inter, up);
    if (def.activation == Activation::kSilu) {
      ops::silu_and_mul(ctx_, gate, up, gate);
    } else {
      ops::gelu_tanh_and_mul(ctx_, gate, up, gate);
    }
    w.down->apply(ctx_, gate, hidden);
    all_reduce(hidden);
    if (w.post_mlp_norm) ops::rms_norm(ctx_, hidden, w.post_mlp_norm->tensor, d.norm_eps, hidden);
    pending_ = true;
    keep_hidden(batch, static_cast<int>(l));
  }
  keep_final_normed(batch);
  if (calculate_kv_scales_ && std::any_of(batch.slot_mapping.begin(), batch.slot_mapping.end(),
                                          [](int64_t slot) { return slot >= 0; })) {
    calculate_kv_scales_ = false;  // vLLM's rule: once, from the first forward that fills the cache
    spdlog::info("KV cache: k/v scales of layer 0 calculated: {} / {}", kv_scales_[0].k,
                 kv_scales_[0].v);
  }
  // Only the rows whose logits are wanted go through the final norm and the LM head.
  const int64_t L = static_cast<int64_t>(batch.logits_indices.size());
  if (L == 0) return {};
  const Tensor gathered = view2(ws_.gathered, L, h);
  const Tensor gathered_hidden = view2(ws_.normed, L, h);
  for (int64_t i = 0; i < L; ++i) {
    const int64_t row = batch.logits_indices[static_cast<size_t>(i)];
    std::memcpy(gathered.as<float>() + i * h, residual.as<float>() + row * h,
                static_cast<size_t>(h) * sizeof(float));
    std::memcpy(gathered_hidden.as<float>() + i * h, hidden.as<float>() + row * h,
                static_cast<size_t>(h) * sizeof(float));
  }
  const Tensor final_normed = view2(ws_.final_normed, L, h);
  if (d.eagle && d.eagle->version == 1) {
    // EAGLE-1's output goes to the LM head without a norm: the residual stream after the layer.
    for (int64_t e = 0; e < L * h; ++e) {
      final_normed.as<float>()[e] = gathered.as<float>()[e] + gathered_hidden.as<float>()[e];
    }
  } else {
    ops::add_rms_norm(ctx_, gathered, gathered_hidden, final_norm_.tensor, d.norm_eps,
                      final_normed);
  }
  if (d.eagle) {
    lm_head_logits(final_normed);  // its draft vocabulary scattered to the target's ids
  } else {
    lm_head(final_normed, L);  // with -tp N: each rank's columns, gathered
  }
  if (d.final_softcap > 0) {
    ops::softcap(ctx_, Tensor{logits_.data(), DType::kF32, Shape{L, d.vocab_size}},
                 d.final_softcap);
  }
  return logits_;
}

void CpuDecoderModel::embed(const ForwardBatch& batch, const Tensor& residual) {
  const int64_t T = batch.num_tokens(), h = def_.hidden_size;
  if (tp_.world == 1) {
    const Tensor ids{const_cast<int32_t*>(batch.token_ids.data()), DType::kI32, Shape{T}};
    ops::embedding(ctx_, ids, embed_tokens_, residual);
    return;
  }
  // Example: vocab 512 over 2 ranks: rank 1 holds ids [256, 512); id 300 is its row 44, id 7
  // looks up row 0 and is zeroed after.
  local_ids_.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t id = batch.token_ids[static_cast<size_t>(t)];
    PAGODA_CHECK(id >= 0 && id < def_.vocab_size, "token id {} outside the vocabulary of {}", id,
                 def_.vocab_size);
    const bool mine = id >= vocab_.first && id < vocab_.first + vocab_.rows;
    local_ids_[static_cast<size_t>(t)] = mine ? static_cast<int32_t>(id - vocab_.first) : 0;
  }
  const Tensor ids{local_ids_.data(), DType::kI32, Shape{T}};
  ops::embedding(ctx_, ids, embed_tokens_, residual);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t id = batch.token_ids[static_cast<size_t>(t)];
    if (id < vocab_.first || id >= vocab_.first + vocab_.rows)
      std::memset(residual.as<float>() + t * h, 0, static_cast<size_t>(h) * sizeof(float));
  }
  all_reduce(residual);
}

void CpuDecoderModel::lm_head(const Tensor& final_normed, int64_t L) {
  const int64_t V = def_.vocab_size;
  logits_.resize(static_cast<size_t>(L * V));
  float* out = tp_.world == 1 ? logits_.data() : nullptr;
  if (tp_.world > 1) {
    local_logits_.assign(static_cast<size_t>(L * vocab_.stride), 0.0f);
    out = local_logits_.data();
  }
  // [L, vocab_.rows]; with -tp N rows of pitch vocab_.rows at the front of local_logits_, spread
  // to pitch stride below.
  const Tensor t{out, DType::kF32, Shape{L, vocab_.rows}};
  if (lm_head_) {
    lm_head_->apply(ctx_, final_normed, t);
  } else {
    ops::linear(ctx_, final_normed, lm_head_table_, nullptr, t);
  }
  if (tp_.world == 1) return;
  // Pitch rows to stride (backwards: row i moves from i * rows to i * stride >= it), gather
  // [world, L, stride], then logits[i, r * stride + j] = gathered[r, i, j] for j < rows of r.
  // Example: vocab 5 over 2 ranks: stride 3, rank 1 holds ids 3, 4 and pads column 2.
  for (int64_t i = L - 1; i > 0; --i) {
    std::memmove(out + i * vocab_.stride, out + i * vocab_.rows,
                 static_cast<size_t>(vocab_.rows) * sizeof(float));
  }
  gathered_logits_.resize(static_cast<size_t>(tp_.world * L * vocab_.stride));
  tp_.comm->all_gather(out, gathered_logits_.data(),
                       static_cast<size_t>(L * vocab_.stride) * sizeof(float));
  for (int r = 0; r < tp_.world; ++r) {
    const VocabShard s = vocab_shard(V, r, tp_.world);
    for (int64_t i = 0; i < L; ++i) {
      std::memcpy(logits_.data() + i * V + s.first,
                  gathered_logits_.data() + (r * L + i) * vocab_.stride,
                  static_cast<size_t>(s.rows) * sizeof(float));
    }
  }
}

}  // namespace

std::unique_ptr<Model> build_cpu_model(const ModelConfig& config, ModelDefinition definition,
                                       WeightStore weights, const OpContext& ctx,
                                       const KVCacheOptions& kv_cache, const TensorParallel& tp) {
  PAGODA_CHECK(!definition.layers.empty(), "{}: a model without layers", config.architecture);
  return std::make_unique<CpuDecoderModel>(config, std::move(definition), std::move(weights), ctx,
                                           kv_cache, tp);
}

}  // namespace pagoda
