// The kernel sequence of one step on the GPU: the ModelDefinition's blocks (model/definition.h)
// in the order the definition composes them, with the small-step fusions of the plain Llama block.
#include <cmath>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/tensor_ops.h"
#include "runtime/cuda/cuda_decoder.h"

namespace pagoda {

namespace {

cuda::Fp8WeightView fp8_view(const CudaLinear& w) {
  cuda::Fp8WeightView v;
  v.w = w.weight.as<uint8_t>();
  v.scale = w.scale.as<float>();
  v.bias = w.bias.get();
  v.n = w.out;
  v.k = w.in;
  return v;
}

cuda::Int8WeightView int8_view(const CudaLinear& w) {
  cuda::Int8WeightView v;
  v.w = w.weight.as<int8_t>();
  v.scale = w.scale.as<float>();
  v.bias = w.bias.get();
  v.n = w.out;
  v.k = w.in;
  return v;
}

cuda::W4WeightView w4_view(const CudaLinear& w) {
  cuda::W4WeightView v;
  v.qweight = w.weight.as<uint32_t>();
  v.meta = w.meta.as<uint32_t>();
  v.perm = w.perm.as<int32_t>();
  v.bias = w.bias.get();
  v.n = w.out;
  v.k = w.in;
  v.group_size = w.group_size;
  return v;
}

}  // namespace

// W4 weights: the GEMV for small m, else dequantized into act_.w4_dense and the dense GEMM.
// FP8 weights: the weight-only GEMV for small m, else W8A8 (x quantized into act_.fp8_x).
// INT8 weights: x quantized into act_.int8_x, then the GEMV for small m, else cuBLASLt's IMMA.
void CudaDecoderModel::linear(const void* x, int64_t m, const CudaLinear& w, void* y) {
  if (w.w4()) {
    cuda::W4LinearParams p;
    p.x = x;
    p.m = m;
    p.w = w4_view(w);
    p.y = y;
    p.dtype = dtype_;
    p.x_scratch = act_.w4_x.get();
    p.dense = act_.w4_dense.get();
    PAGODA_CUDA_CHECK(cuda::linear_w4(blas_, p, stream_));
    return;
  }
  if (w.fp8()) {
    cuda::Fp8LinearParams p;
    p.x = x;
    p.m = m;
    p.w = fp8_view(w);
    p.y = y;
    p.dtype = dtype_;
    p.input_scale = w.input_scale;
    p.weight_only = w.weight_only;
    p.xq = act_.fp8_x.as<uint8_t>();
    p.x_scale = act_.fp8_scale.as<float>();
    PAGODA_CUDA_CHECK(cuda::linear_fp8(blas_, p, stream_));
    return;
  }
  if (w.int8()) {
    cuda::Int8LinearParams p;
    p.x = x;
    p.m = m;
    p.w = int8_view(w);
    p.y = y;
    p.dtype = dtype_;
    p.input_scale = w.input_scale;
    p.xq = act_.int8_x.as<int8_t>();
    p.x_scale = act_.int8_scale.as<float>();
    p.acc = act_.int8_acc.as<int32_t>();
    PAGODA_CUDA_CHECK(cuda::linear_int8(blas_, p, stream_));
    return;
  }
  PAGODA_CUDA_CHECK(cuda::linear(blas_, x, m, w.in, w.weight.get(), w.out, w.bias.get(), y,
                                 cuda::LinearTypes{dtype_, w.dtype, dtype_}, stream_));
}

cuda::GemvFusion CudaDecoderModel::fusion(const DeviceBuffer& norm_weight,
                                          cuda::GemvEpilogue epilogue) const {
  cuda::GemvFusion f;
  f.norm_weight = norm_weight.get();
  f.norm_eps = def_.norm_eps;
  f.epilogue = epilogue;
  return f;
}

// The fused projection of a small step: the CUDA-core GEMV at m = 1, the tensor-core one above
// (FP8 and W4 weights: their CUDA-core GEMVs at every m <= kFp8GemvMaxM / kW4GemvMaxM; INT8: x,
// normalised when the fusion has the norm, quantized into act_.int8_x, then the dp4a GEMV with
// the fusion's epilogue).
void CudaDecoderModel::gemv_fused(const void* x, int64_t m, const CudaLinear& w, void* y,
                                  const cuda::GemvFusion& f) {
  if (w.w4()) {
    PAGODA_CUDA_CHECK(
        cuda::linear_w4_gemv(x, m, w4_view(w), y, f, act_.w4_x.get(), dtype_, stream_));
    return;
  }
  if (w.fp8()) {
    PAGODA_CUDA_CHECK(cuda::linear_fp8_gemv(x, m, fp8_view(w), y, f, dtype_, stream_));
    return;
  }
  if (w.int8()) {
    cuda::Int8QuantizeParams q;
    q.x = x;
    q.m = m;
    q.k = w.in;
    q.static_scale = w.input_scale;
    q.norm_weight = f.norm_weight;
    q.norm_eps = f.norm_eps;
    q.q = act_.int8_x.as<int8_t>();
    q.x_scale = act_.int8_scale.as<float>();
    q.dtype = dtype_;
    PAGODA_CUDA_CHECK(cuda::quantize_int8_rows(q, stream_));
    cuda::GemvFusion epilogue = f;
    epilogue.norm_weight = nullptr;  // applied by the quantization
    PAGODA_CUDA_CHECK(
        cuda::linear_int8_gemv(q.q, q.x_scale, m, int8_view(w), y, epilogue, dtype_, stream_));
    return;
  }
  if (m <= cuda::kGemvMaxM) {
    PAGODA_CUDA_CHECK(cuda::linear_gemv_fused(x, m, w.in, w.weight.get(), w.out, w.bias.get(), y, f,
                                              dtype_, stream_));
  } else {
    PAGODA_CUDA_CHECK(cuda::linear_gemv_mma_fused(x, m, w.in, w.weight.get(), w.out, w.bias.get(),
                                                  y, f, dtype_, stream_));
  }
}

/// The attention input block of layer l: input norm (with the pending residual add), the qkv
/// projection and its bias, the per-head q/k norms, RoPE and the cache write. Fused: the norm runs
/// inside the GEMV, and with fused_rope RoPE and the cache write too.
void CudaDecoderModel::attention_input(int l, const StepInputs& in, int64_t T, bool fused,
                                       bool fused_rope, const void* eagle_x) {
  const LayerDef& def = def_.layers[static_cast<size_t>(l)];
  const CudaLayerWeights& w = w_.layers[static_cast<size_t>(l)];
  const AttentionDef& a = def.attention;
  const size_t es = dtype_size(dtype_);
  const int64_t h = def_.hidden_size, q = a.q_size(), kv = a.kv_size();
  const int64_t qkv_width = def.qkv.out();
  char* qkv = act_.qkv.as<char>();
  if (fused) {
    cuda::GemvFusion f = fusion(w.input_norm, cuda::GemvEpilogue::kStore);
    if (fused_rope) {
      f.epilogue = cuda::GemvEpilogue::kRopeCache;
      f.rope.positions = in.positions;
      f.rope.inv_freq = inv_freq_.as<float>();
      f.rope.slot_mapping = in.slots;
      f.rope.key_cache = keys_[static_cast<size_t>(l)].get();
      f.rope.value_cache = values_[static_cast<size_t>(l)].get();
      f.rope.layout = layout_;
      f.rope.num_heads = a.num_heads;
      f.rope.cache_dtype = kv_spec_.dtype;
    }
    gemv_fused(act_.residual.get(), T, w.qkv, qkv, f);
  } else if (eagle_x != nullptr) {
    linear(eagle_x, T, w.qkv, qkv);
  } else {
    if (l == 0) {
      PAGODA_CUDA_CHECK(cuda::rms_norm(act_.residual.get(), w.input_norm.get(), T, h, def_.norm_eps,
                                       act_.normed.get(), dtype_, stream_));
    } else {
      PAGODA_CUDA_CHECK(cuda::add_rms_norm(act_.residual.get(), act_.hidden.get(),
                                           w.input_norm.get(), T, h, def_.norm_eps,
                                           act_.normed.get(), dtype_, stream_));
    }
    linear(act_.normed.get(), T, w.qkv, qkv);
  }
  if (fused_rope) return;  // RoPE and the cache write ran in the GEMV
  cuda::RopeCacheParams rp;
  rp.q = qkv;
  rp.k = qkv + static_cast<size_t>(q) * es;
  rp.v = qkv + static_cast<size_t>(q + kv) * es;
  rp.q_stride = rp.k_stride = rp.v_stride = qkv_width;
  rp.positions = in.positions;
  rp.inv_freq = inv_freq_.as<float>();
  rp.slot_mapping = in.slots;
  rp.key_cache = keys_[static_cast<size_t>(l)].get();
  rp.value_cache = values_[static_cast<size_t>(l)].get();
  rp.num_tokens = T;
  rp.num_heads = a.num_heads;
  rp.layout = layout_;
  rp.dtype = dtype_;
  rp.cache_dtype = kv_spec_.dtype;
  if (kv_scales_.get() != nullptr) {
    rp.k_scale = kv_scales_.as<float>() + 2 * l;
    rp.v_scale = rp.k_scale + 1;
  }
  if (a.q_norm) {  // per-head RMSNorm of q and k, inside the RoPE kernel (Qwen3)
    rp.q_norm = w.q_norm.get();
    rp.k_norm = w.k_norm.get();
    rp.norm_eps = def_.norm_eps;
  }
  PAGODA_CUDA_CHECK(cuda::rope_and_cache(rp, stream_));
}

void CudaDecoderModel::keep_hidden(int layer, int64_t T, bool pending) {
  const int64_t n = T * def_.hidden_size;
  const size_t es = dtype_size(dtype_);
  for (size_t i = 0; i < hidden_layers_.size(); ++i) {
    if (hidden_layers_[i] != layer) continue;
    void* dst = hidden_dev_.at(i * static_cast<size_t>(n) * es);
    if (pending) {
      PAGODA_CUDA_CHECK(cuda::add(act_.residual.get(), act_.hidden.get(), dst, dtype_, n, stream_));
    } else {
      PAGODA_CUDA_CHECK(cudaMemcpyAsync(dst, act_.residual.get(), static_cast<size_t>(n) * es,
                                        cudaMemcpyDeviceToDevice, stream_));
    }
  }
}

// Row-wise concatenation [T, 2h] of two [T, h] tensors: row r of `cat` is a[r] then b[r]. Two
// strided copies; e.g. h = 4: cat row 1 holds a's elements 4..7 at 8..11 and b's 4..7 at 12..15.
namespace {
void concat_rows(const void* a, const void* b, int64_t T, int64_t h, size_t es, void* cat,
                 cudaStream_t stream) {
  const size_t row = static_cast<size_t>(h) * es;
  PAGODA_CUDA_CHECK(cudaMemcpy2DAsync(cat, 2 * row, a, row, row, static_cast<size_t>(T),
                                      cudaMemcpyDeviceToDevice, stream));
  PAGODA_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(cat) + row, 2 * row, b, row, row,
                                      static_cast<size_t>(T), cudaMemcpyDeviceToDevice, stream));
}
}  // namespace

const void* CudaDecoderModel::eagle_input(int64_t T) {
  const EagleHeadDef& e = *def_.eagle;
  const int64_t h = def_.hidden_size;
  const size_t es = dtype_size(dtype_);
  void* embeds = act_.normed.get();
  void* residual = act_.residual.get();
  void* cat = act_.eagle_cat.get();
  if (e.version == 1) {
    // x = fc([embed | h]) [T, h]; the layer's input norm is left out.
    concat_rows(embeds, act_.eagle_in.get(), T, h, es, cat, stream_);
    linear(cat, T, w_.eagle.fc, residual);
    return residual;
  }
  // EAGLE-3: x = fc(three target layers) [T, fc.in], or the head's own output [T, h] as it is.
  if (eagle_width_ == e.fc.in) {
    linear(act_.eagle_in.get(), T, w_.eagle.fc, residual);
  } else {
    PAGODA_CUDA_CHECK(cudaMemcpyAsync(residual, act_.eagle_in.get(),
                                      static_cast<size_t>(T * h) * es, cudaMemcpyDeviceToDevice,
                                      stream_));
  }
  // Attention input [T, 2h]: input_norm(embeds) then hidden_norm(x), each normed into act_.hidden
  // (free until the layer's o projection) and copied to its half.
  void* normed = act_.hidden.get();
  const size_t row = static_cast<size_t>(h) * es;
  PAGODA_CUDA_CHECK(cuda::rms_norm(embeds, w_.layers[0].input_norm.get(), T, h, def_.norm_eps,
                                   normed, dtype_, stream_));
  PAGODA_CUDA_CHECK(cudaMemcpy2DAsync(cat, 2 * row, normed, row, row, static_cast<size_t>(T),
                                      cudaMemcpyDeviceToDevice, stream_));
  PAGODA_CUDA_CHECK(cuda::rms_norm(residual, w_.eagle.hidden_norm.get(), T, h, def_.norm_eps,
                                   normed, dtype_, stream_));
  PAGODA_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(cat) + row, 2 * row, normed, row, row,
                                      static_cast<size_t>(T), cudaMemcpyDeviceToDevice, stream_));
  return cat;
}

void CudaDecoderModel::keep_final_normed(int64_t T, bool fused) {
  const auto num_layers = static_cast<int32_t>(def_.layers.size());
  const int64_t n = T * def_.hidden_size;
  const size_t es = dtype_size(dtype_);
  for (size_t i = 0; i < hidden_layers_.size(); ++i) {
    if (hidden_layers_[i] != num_layers) continue;
    void* dst = hidden_dev_.at(i * static_cast<size_t>(n) * es);
    // add_rms_norm would add the pending sublayer output into the residual stream, which the LM
    // head's rows still read: the sum goes to dst and is normed there.
    const void* x = act_.residual.get();
    if (!fused) {
      PAGODA_CUDA_CHECK(cuda::add(act_.residual.get(), act_.hidden.get(), dst, dtype_, n, stream_));
      x = dst;
    }
    PAGODA_CUDA_CHECK(cuda::rms_norm(x, w_.final_norm.get(), T, def_.hidden_size, def_.norm_eps,
                                     dst, dtype_, stream_));
  }
}

/// The kernel sequence of one step, from the embedding to the logits rows in logits_dtype_. It
/// only launches work on stream_ (no allocation, no host synchronisation), so it can be captured.
/// The residual stream lives in act_.residual; outside the fused path a sublayer's output waits in
/// act_.hidden for the next add_rms_norm.
void CudaDecoderModel::run_kernels(const StepInputs& in, const cuda::AttentionPlan& plan, int64_t T,
                                   int S, int64_t L) {
  const ModelDefinition& d = def_;
  const size_t es = dtype_size(dtype_);
  const int64_t h = d.hidden_size;
  const float eps = d.norm_eps;
  void* residual = act_.residual.get();
  void* hidden = act_.hidden.get();
  void* normed = act_.normed.get();
  // Small steps (decode at batch 1-8) fold the norms, residual adds and SiLU-and-mul into the
  // GEMVs: 6 kernels per layer instead of 10 (with the RoPE below). The residual stream is then
  // always complete in `residual`.
  const bool fused = fuse_small_steps_ && T <= fused_max_m();
  const int head_dim = d.layers[0].attention.head_dim;
  // ... and RoPE with the cache write into the qkv GEMV, unless the per-head q/k norms (Qwen3) must
  // come between them (rope_and_cache does those norms itself). The CUDA-core GEMV takes the pairs
  // (i, i + head_dim / 2) two by two (head_dim % 4 == 0), the tensor-core one 16 by 16 (% 32).
  // A code cache (fp8, int8) is written by rope_and_cache, which encodes (the GEMVs' epilogues
  // store the activation dtype only).
  const bool fused_rope = fused && !d.layers[0].attention.q_norm && head_dim % 4 == 0 &&
                          (T <= cuda::kGemvMaxM || head_dim % 32 == 0) && kv_spec_.dtype == dtype_;

  // An EAGLE head keeps embed(token) apart (in normed): its residual stream comes from fc.
  void* embedded = d.eagle ? normed : residual;
  embed(in, T, embedded);
  const void* eagle_x = d.eagle ? eagle_input(T) : nullptr;
  keep_hidden(-1, T, false);
  for (size_t l = 0; l < d.layers.size(); ++l) {
    const LayerDef& def = d.layers[l];
    const CudaLayerWeights& w = w_.layers[l];
    const AttentionDef& a = def.attention;
    const int64_t inter = def.gate_up.out_segments[0];
    attention_input(static_cast<int>(l), in, T, fused, fused_rope, l == 0 ? eagle_x : nullptr);

    cuda::PagedAttentionParams ap;
    ap.q = act_.qkv.get();
    ap.q_stride = def.qkv.out();
    ap.positions = in.positions;
    ap.query_start_loc = in.query_start;
    ap.seq_lens = in.seq_lens;
    ap.block_tables = in.block_tables;
    ap.key_cache = keys_[l].get();
    ap.value_cache = values_[l].get();
    ap.out = act_.attn.get();
    ap.num_tokens = T;
    ap.num_seqs = S;
    ap.num_heads = a.num_heads;
    ap.max_blocks_per_seq = in.table_width;
    ap.sliding_window = a.sliding_window;
    ap.scale = a.scale;
    ap.softcap = a.softcap;
    ap.layout = layout_;
    ap.dtype = dtype_;
    ap.kv_dtype = kv_spec_.dtype;
    ap.hopper = options_.hopper_attention;
    if (kv_scales_.get() != nullptr) {
      ap.k_scale = kv_scales_.as<float>() + 2 * l;
      ap.v_scale = ap.k_scale + 1;
    }
    PAGODA_CUDA_CHECK(
        cuda::paged_attention(ap, plan, limits_, attention_workspace_.get(), stream_));

    if (fused && tp_.world > 1) {
      // -tp N: o and down give partial sums, added over the ranks before the residual add.
      gemv_fused(act_.attn.get(), T, w.o, hidden,
                 fusion(DeviceBuffer(), cuda::GemvEpilogue::kStore));
      all_reduce(hidden, T * h);
      PAGODA_CUDA_CHECK(cuda::add(residual, hidden, residual, dtype_, T * h, stream_));
      gemv_fused(residual, T, w.gate_up, act_.act.get(),
                 fusion(w.pre_mlp_norm, cuda::GemvEpilogue::kGatedSilu));
      gemv_fused(act_.act.get(), T, w.down, hidden,
                 fusion(DeviceBuffer(), cuda::GemvEpilogue::kStore));
      all_reduce(hidden, T * h);
      PAGODA_CUDA_CHECK(cuda::add(residual, hidden, residual, dtype_, T * h, stream_));
      keep_hidden(static_cast<int>(l), T, false);
      continue;
    }
    if (fused) {
      // The residual stream is updated in place by the o and down projections; the MLP's norm
      // and SiLU-and-mul run inside the gate/up projection.
      gemv_fused(act_.attn.get(), T, w.o, residual,
                 fusion(DeviceBuffer(), cuda::GemvEpilogue::kAccumulate));
      gemv_fused(residual, T, w.gate_up, act_.act.get(),
                 fusion(w.pre_mlp_norm, cuda::GemvEpilogue::kGatedSilu));
      gemv_fused(act_.act.get(), T, w.down, residual,
                 fusion(DeviceBuffer(), cuda::GemvEpilogue::kAccumulate));
      keep_hidden(static_cast<int>(l), T, false);
      continue;
    }
    linear(act_.attn.get(), T, w.o, hidden);
    all_reduce(hidden, T * h);      // -tp N: the ranks' partial sums, before the norm and the add
    if (def.post_attention_norm) {  // Gemma-2: the attention output is normed before the add
      PAGODA_CUDA_CHECK(
          cuda::rms_norm(hidden, w.post_attention_norm.get(), T, h, eps, hidden, dtype_, stream_));
    }
    PAGODA_CUDA_CHECK(cuda::add_rms_norm(residual, hidden, w.pre_mlp_norm.get(), T, h, eps, normed,
                                         dtype_, stream_));
    linear(normed, T, w.gate_up, act_.gate_up.get());
    const void* up = act_.gate_up.at(static_cast<size_t>(inter) * es);
    if (def.activation == Activation::kSilu) {
      PAGODA_CUDA_CHECK(cuda::silu_and_mul(act_.gate_up.get(), up, T, inter, 2 * inter,
                                           act_.act.get(), dtype_, stream_));
    } else {
      PAGODA_CUDA_CHECK(cuda::gelu_tanh_and_mul(act_.gate_up.get(), up, T, inter, 2 * inter,
                                                act_.act.get(), dtype_, stream_));
    }
    linear(act_.act.get(), T, w.down, hidden);
    all_reduce(hidden, T * h);
    if (def.post_mlp_norm) {
      PAGODA_CUDA_CHECK(
          cuda::rms_norm(hidden, w.post_mlp_norm.get(), T, h, eps, hidden, dtype_, stream_));
    }
    keep_hidden(static_cast<int>(l), T, true);
  }
  keep_final_normed(T, fused);
  if (L == 0) return;
  if (d.eagle && d.eagle->version == 1) {
    // EAGLE-1's output goes to the LM head without a norm: the residual stream after the layer.
    PAGODA_CUDA_CHECK(cuda::add(residual, hidden, normed, dtype_, T * h, stream_));
  } else if (fused) {
    PAGODA_CUDA_CHECK(
        cuda::rms_norm(residual, w_.final_norm.get(), T, h, eps, normed, dtype_, stream_));
  } else {
    PAGODA_CUDA_CHECK(cuda::add_rms_norm(residual, hidden, w_.final_norm.get(), T, h, eps, normed,
                                         dtype_, stream_));
  }
  // Only the rows whose logits are wanted go through the LM head.
  PAGODA_CUDA_CHECK(cuda::gather_rows(normed, in.logits_rows, L, h * static_cast<int64_t>(es),
                                      gathered_.get(), stream_));
  if (tp_.world > 1) {
    lm_head_tensor_parallel(gathered_.get(), L);
    if (d.final_softcap > 0) {
      PAGODA_CUDA_CHECK(
          cuda::softcap(logits_dtype_.get(), dtype_, L * d.vocab_size, d.final_softcap, stream_));
    }
    return;
  }
  // An EAGLE-3 head's draft vocabulary: its rows placed at their target ids (-inf elsewhere).
  const bool scatter = w_.eagle.target_columns.get() != nullptr;
  const int64_t head_rows = d.eagle ? d.eagle->draft_vocab_size : d.vocab_size;
  void* head_out = scatter ? draft_logits_.get() : logits_dtype_.get();
  PAGODA_CUDA_CHECK(cuda::linear(blas_, gathered_.get(), L, h, w_.lm_head_weight().get(), head_rows,
                                 nullptr, head_out, dtype_, stream_));
  if (scatter) {
    PAGODA_CUDA_CHECK(cuda::gather_columns(head_out, L, head_rows,
                                           w_.eagle.target_columns.as<int32_t>(), d.vocab_size,
                                           logits_dtype_.get(), dtype_, stream_));
  }
  if (d.final_softcap > 0) {
    PAGODA_CUDA_CHECK(
        cuda::softcap(logits_dtype_.get(), dtype_, L * d.vocab_size, d.final_softcap, stream_));
  }
}

}  // namespace pagoda
