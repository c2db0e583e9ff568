#include "runtime/cuda/cuda_weights.h"

#include <algorithm>
#include <map>

#include "core/logging.h"
#include "core/status.h"
#include "kernels/cpu/int4_repack.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/linear_w4.h"
#include "kernels/cuda/tensor_ops.h"
#include "model/dummy_weights.h"
#include "model/linear.h"
#include "model/quant/quant_linear.h"
#include "runtime/cuda/weight_streamer.h"

namespace pagoda {

bool cuda_supports(const LinearDef& def) {
  switch (def.format) {
    case WeightFormat::kDense:
    case WeightFormat::kFp8Online:
      return true;
    case WeightFormat::kFp8:
    case WeightFormat::kInt8:
      return (def.quant.weight_scales == ScaleStrategy::kTensor ||
              def.quant.weight_scales == ScaleStrategy::kChannel) &&
             ((def.quant.activations == ActivationQuant::kNone &&
               def.format == WeightFormat::kFp8) ||
              def.quant.activations == ActivationQuant::kDynamicToken ||
              def.quant.activations == ActivationQuant::kStaticTensor);
    case WeightFormat::kGptq:
    case WeightFormat::kAwq:
      return def.quant.bits == 4 && def.quant.group_size > 0 &&
             def.quant.group_size % cuda::kW4Chunk == 0 && def.in % def.quant.group_size == 0;
    default:
      return false;
  }
}

namespace {

/// Writes tensors by name into device memory: dummy values at once, checkpoint tensors (checked
/// when named) together at finish(), through weight_streamer.h.
class Uploader {
 public:
  Uploader(const std::vector<TensorSpec>& specs, CudaWeightSource source, DType dtype, int device,
           const RuntimeOptions& options, ThreadPool& pool, cudaStream_t stream)
      : specs_(specs),
        source_(std::move(source)),
        dtype_(dtype),
        device_(device),
        options_(options),
        pool_(pool),
        stream_(stream) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      index_[specs_[i].name] = i;
      total_elements_ += specs_[i].shape.num_elements();
    }
    if (!source_.store) {
      // The small tensors of a quantized format (scales) are drawn on the host, as the CPU draws
      // them; the large ones (codes) on the device, in put_codes.
      dummy_small_.emplace(make_empty_weight_store("dummy weights"));
      for (size_t i = 0; i < specs_.size(); ++i) {
        const TensorSpec& spec = specs_[i];
        // W4 codes (".qweight") are drawn on the device too (Uploader::w4).
        if (!spec.dtype || spec.name.ends_with("weight")) continue;
        dummy_small_->add_owned(spec.name, *spec.dtype, spec.shape,
                                make_dummy_tensor(spec, i, source_.seed, pool_));
      }
    }
  }

  [[nodiscard]] bool has(const std::string& name) const {
    return source_.store ? source_.store->contains(name) : index_.count(name) != 0;
  }

  /// A new buffer of `elements` in the activation dtype.
  [[nodiscard]] DeviceBuffer alloc(int64_t elements) const {
    return DeviceBuffer(static_cast<size_t>(elements) * dtype_size(dtype_));
  }

  /// Writes tensor `name` (checked against `shape`) to dst in the activation dtype.
  void put(const std::string& name, const Shape& shape, void* dst) {
    const int64_t n = shape.num_elements();
    if (!source_.store) {
      dummy_progress(n);
      const auto it = index_.find(name);
      PAGODA_CHECK(it != index_.end(), "dummy weights have no tensor {}", name);
      const DummyInit init = dummy_init(specs_[it->second], it->second, source_.seed);
      PAGODA_CUDA_CHECK(
          cuda::fill_uniform(dst, dtype_, n, init.seed, init.offset, init.scale, stream_));
      return;
    }
    const Tensor& t = checked_float_tensor(*source_.store, name, shape);
    pending_.push_back(WeightUpload{t.data, t.dtype, dst, dtype_, n});
  }

  /// A norm weight with its offset folded in once the uploads are done.
  DeviceBuffer norm(const NormDef& def) {
    DeviceBuffer b = alloc(def.size);
    put(def.name, Shape{def.size}, b.get());
    if (def.weight_offset != 0) offsets_.push_back({b.get(), def.size, def.weight_offset});
    return b;
  }
  DeviceBuffer optional_norm(const std::optional<NormDef>& def) {
    return def ? norm(*def) : DeviceBuffer();
  }

  /// A projection: each source's rows (and bias) at its offset of the stacked weight, in its
  /// format (cuda_weights.h).
  CudaLinear linear(const LinearDef& def) {
    PAGODA_CHECK(cuda_supports(def), "{}: {} weights do not run on the GPU", def.name,
                 weight_format_name(def.format));
    CudaLinear l;
    l.format = def.format;
    l.dtype = def.format == WeightFormat::kDense  ? dtype_
              : l.w4()                            ? DType::kI32
              : def.format == WeightFormat::kInt8 ? DType::kI8
                                                  : DType::kF8E4M3;
    l.out = def.out();
    l.in = def.in;
    if (def.bias) l.bias = alloc(l.out);
    const size_t es = dtype_size(dtype_);
    if (l.w4()) {
      w4(def, l);
    } else if (def.format == WeightFormat::kDense) {
      l.weight = alloc(l.out * l.in);
      for (const LinearDef::Source& s : def.sources) {
        const int64_t rows = def.source_rows(s), first = def.source_offset(s);
        put(s.prefix + ".weight", Shape{rows, def.in},
            l.weight.at(static_cast<size_t>(first * def.in) * es));
      }
    } else {
      l.weight = DeviceBuffer(static_cast<size_t>(l.out * l.in));
      l.scale = DeviceBuffer(static_cast<size_t>(l.out) * sizeof(float));
      l.weight_only =
          def.quant.activations == ActivationQuant::kNone && def.format == WeightFormat::kFp8;
      if (def.format == WeightFormat::kFp8 || def.format == WeightFormat::kInt8) {
        eight_bit(def, l);
      } else {
        fp8_online(def, l);
      }
    }
    if (def.bias) {
      for (const LinearDef::Source& s : def.sources) {
        put(s.prefix + ".bias", Shape{def.source_rows(s)},
            l.bias.at(static_cast<size_t>(def.source_offset(s)) * es));
      }
    }
    return l;
  }

  /// A small tensor read on the host as it is (the checkpoint's, or the dummy one).
  [[nodiscard]] const Tensor& host_tensor(const std::string& name) const {
    return small_store().get(name);
  }
  [[nodiscard]] std::string source_of(const std::string& name) const {
    return small_store().source_of(name);
  }

  /// Copies the checkpoint tensors named so far, waits for every upload, then folds the norm
  /// offsets in.
  void finish() {
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (!pending_.empty()) {
      stream_weights(pending_, device_, WeightStreamOptions::from(options_, pool_.num_threads()),
                     pool_, source_.progress);
      pending_.clear();
    }
    for (OnlineFp8& o : online_) {
      PAGODA_CUDA_CHECK(cuda::quantize_fp8_rows(o.staging.get(), o.rows, o.in, 0.0f,
                                                cuda::Fp8ScaleRule::kWeight, o.weight, o.scale,
                                                dtype_, stream_));
    }
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    online_.clear();
    for (const Offset& o : offsets_)
      PAGODA_CUDA_CHECK(cuda::affine(o.ptr, dtype_, o.count, 1.0f, o.offset, stream_));
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  void dummy_progress(int64_t n) {
    done_elements_ += n;
    if (source_.progress && total_elements_ > 0) {
      source_.progress(std::min(
          1.0, static_cast<double>(done_elements_) / static_cast<double>(total_elements_)));
    }
  }

  /// Where the small tensors of a quantized format come from: the checkpoint, or the dummy ones.
  [[nodiscard]] const WeightStore& small_store() const {
    return source_.store ? *source_.store : *dummy_small_;
  }

  /// A serialized FP8 or INT8 projection (kFp8, kInt8): each source's e4m3 / int8 rows uploaded
  /// as they are ([rows, in] row-major: what the GEMVs and cuBLASLt's "TN" GEMMs read), its scales
  /// expanded to one per row (scale [out]), its static input scale folded into the largest.
  void eight_bit(const LinearDef& def, CudaLinear& l) {
    const DType code = l.dtype;  // kF8E4M3 or kI8
    std::vector<float> scales(static_cast<size_t>(l.out));
    const WeightStore& small = small_store();
    const std::initializer_list<DType> scale_dtypes = {DType::kF32, DType::kBF16, DType::kF16};
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s), first = def.source_offset(s);
      auto* dst = static_cast<uint8_t*>(l.weight.at(static_cast<size_t>(first * def.in)));
      const std::string name = s.prefix + ".weight";
      if (source_.store) {
        const Tensor& t =
            checked_quant_tensor(*source_.store, name, {Shape{rows, def.in}}, {code}, def);
        check_zero_points_absent(*source_.store, s.prefix + ".weight_zero_point", def);
        check_zero_points_absent(*source_.store, s.prefix + ".input_zero_point", def);
        pending_.push_back(WeightUpload{t.data, code, dst, code, rows * def.in});
      } else {
        const auto it = index_.find(name);
        PAGODA_CHECK(it != index_.end(), "dummy weights have no tensor {}", name);
        const TensorSpec& spec = specs_[it->second];
        const DummyInit init = dummy_init(spec, it->second, source_.seed);
        dummy_progress(rows * def.in);
        PAGODA_CUDA_CHECK(cuda::fill_uniform(dst, code, rows * def.in, init.seed, 0.0f,
                                             static_cast<float>(spec.fill_value), stream_));
      }
      // Rows [first, first + rows) of scale [out]: e.g. a fused qkv of 4096 + 1024 + 1024 rows with
      // per-tensor scales holds q's scale in 0..4095, k's in 4096..5119, v's in 5120..6143.
      const std::string scale_name = s.prefix + ".weight_scale";
      float* out = scales.data() + first;
      if (def.quant.weight_scales == ScaleStrategy::kTensor) {
        std::fill(out, out + rows, scalar_scale(small, scale_name, def));
      } else {
        const std::vector<float> v = float_values(checked_quant_tensor(
            small, scale_name, {Shape{rows, 1}, Shape{rows}}, scale_dtypes, def));
        std::copy(v.begin(), v.end(), out);
      }
      if (def.quant.activations == ActivationQuant::kStaticTensor) {
        l.input_scale =
            std::max(l.input_scale, scalar_scale(small, s.prefix + ".input_scale", def));
      }
    }
    PAGODA_CUDA_CHECK(cudaMemcpy(l.scale.get(), scales.data(), scales.size() * sizeof(float),
                                 cudaMemcpyHostToDevice));
  }

  /// --quantization fp8 on a float checkpoint: the dense rows staged in the activation dtype, then
  /// quantized per row on the device (cuda::quantize_fp8_rows, kWeight: the CPU's codes and
  /// scales for the same values). Dummy weights are quantized at once; checkpoint ones in finish(),
  /// after their upload, so the staging of every such projection is held until then.
  void fp8_online(const LinearDef& def, CudaLinear& l) {
    DeviceBuffer staging = alloc(l.out * l.in);
    const size_t es = dtype_size(dtype_);
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s), first = def.source_offset(s);
      put(s.prefix + ".weight", Shape{rows, def.in},
          staging.at(static_cast<size_t>(first * def.in) * es));
    }
    OnlineFp8 o{std::move(staging), static_cast<uint8_t*>(l.weight.get()), l.scale.as<float>(),
                l.out, l.in};
    if (source_.store) {
      online_.push_back(std::move(o));
      return;
    }
    PAGODA_CUDA_CHECK(cuda::quantize_fp8_rows(o.staging.get(), o.rows, o.in, 0.0f,
                                              cuda::Fp8ScaleRule::kWeight, o.weight, o.scale,
                                              dtype_, stream_));
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));  // before the staging is freed
  }

  /// A 4-bit GPTQ / AWQ projection: every source's scales and zero points unpacked as the CPU does
  /// (unpack_*_source), its codes repacked on the host into rows [first, first + rows) of one W4
  /// layout (kernels/cpu/int4_repack.h), then uploaded. Act-order: the sources must share g_idx
  /// (AutoGPTQ's q, k, v and gate, up do: one input, one Hessian order), whose sorting is the
  /// layout's permutation. Dummy weights: codes drawn on the device, scales and zeros as the CPU.
  void w4(const LinearDef& def, CudaLinear& l) {
    const WeightStore& small = small_store();
    const bool gptq = def.format == WeightFormat::kGptq;
    l.group_size = def.quant.group_size;
    cpu::W4Layout layout = cpu::make_w4_layout(source_.store ? l.out : 0, def.in, l.group_size);
    layout.n = l.out;
    layout.meta.assign(static_cast<size_t>(l.out * layout.groups()), 0u);
    std::vector<int32_t> first_g_idx;
    int64_t inexact = 0;
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s), first = def.source_offset(s);
      const Int4Unpacked u =
          gptq ? unpack_gptq_source(small, def, s) : unpack_awq_source(small, def, s);
      if (gptq && first_g_idx.empty()) {
        first_g_idx = u.g_idx;
        if (!cpu::w4_permutation(u.g_idx.data(), def.in, l.group_size, &layout.perm)) {
          throw InvalidArgument(fmt::format(
              "{}: '{}.g_idx' does not give each group exactly {} input features: the GPU's "
              "act-order layout needs that (pass --device cpu)",
              small.description(), s.prefix, l.group_size));
        }
      } else if (gptq && u.g_idx != first_g_idx) {
        throw InvalidArgument(fmt::format(
            "{}: '{}.g_idx' differs from '{}.g_idx': the GPU runs one act-order permutation per "
            "fused projection ({}; pass --device cpu)",
            small.description(), s.prefix, def.sources.front().prefix, def.name));
      }
      if (!source_.store) {
        dummy_progress(rows * def.in);
        inexact += cpu::repack_w4_meta(u.scales.data(), u.zeros.data(), rows, first, &layout);
        continue;
      }
      const Tensor& qweight = int4_qweight(*source_.store, def, s);
      if (gptq) {
        cpu::GptqWeight gw;
        gw.qweight = qweight.as<int32_t>();
        gw.bits = 4;
        gw.n = rows;
        gw.k = def.in;
        gw.g_idx = u.g_idx.data();
        gw.scales = u.scales.data();
        gw.zeros = u.zeros.data();
        inexact += cpu::repack_w4(gw, first, &layout);
      } else {
        cpu::AwqWeight aw;
        aw.qweight = qweight.as<int32_t>();
        aw.n = rows;
        aw.k = def.in;
        aw.group_size = l.group_size;
        aw.scales = u.scales.data();
        aw.zeros = u.zeros.data();
        inexact += cpu::repack_w4(aw, first, &layout);
      }
    }
    if (inexact > 0) {
      spdlog::warn(
          "{}: {} scales of {} are not fp16 values; the GPU's W4 layout rounds them to fp16",
          small.description(), inexact, def.name);
    }
    const int64_t words = l.out * (def.in / 8);
    l.weight = DeviceBuffer(static_cast<size_t>(words) * sizeof(uint32_t));
    if (source_.store) {
      PAGODA_CUDA_CHECK(cudaMemcpy(l.weight.get(), layout.qweight.data(),
                                   layout.qweight.size() * sizeof(uint32_t),
                                   cudaMemcpyHostToDevice));
    } else {
      const auto it = index_.find(def.sources.front().prefix + ".qweight");
      PAGODA_CHECK(it != index_.end(), "dummy weights have no tensor {}.qweight",
                   def.sources.front().prefix);
      PAGODA_CUDA_CHECK(cuda::fill_random_words(
          l.weight.as<uint32_t>(), words,
          dummy_init(specs_[it->second], it->second, source_.seed).seed, stream_));
    }
    l.meta = DeviceBuffer(layout.meta.size() * sizeof(uint32_t));
    PAGODA_CUDA_CHECK(cudaMemcpy(l.meta.get(), layout.meta.data(),
                                 layout.meta.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
    if (!layout.perm.empty()) {
      l.perm = DeviceBuffer(layout.perm.size() * sizeof(int32_t));
      PAGODA_CUDA_CHECK(cudaMemcpy(l.perm.get(), layout.perm.data(),
                                   layout.perm.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    }
  }

  struct OnlineFp8 {
    DeviceBuffer staging;  // [rows, in] in the activation dtype
    uint8_t* weight;       // [rows, in] e4m3
    float* scale;          // [rows]
    int64_t rows, in;
  };
  struct Offset {
    void* ptr;
    int64_t count;
    float offset;
  };
  const std::vector<TensorSpec>& specs_;
  CudaWeightSource source_;
  DType dtype_;
  int device_;
  const RuntimeOptions& options_;
  ThreadPool& pool_;
  cudaStream_t stream_;
  int64_t total_elements_ = 0, done_elements_ = 0;
  std::map<std::string, size_t> index_;  // dummy weights: name -> spec index (its seed)
  std::vector<WeightUpload> pending_;    // checkpoint tensors, in upload order
  std::vector<Offset> offsets_;
  std::vector<OnlineFp8> online_;           // checkpoint projections quantized in finish()
  std::optional<WeightStore> dummy_small_;  // dummy weights: the quantized formats' scales
};

/// An EAGLE-3 head's d2t [draft_vocab] I64 (draft id i is target id i + d2t[i]) inverted to
/// CudaEagleWeights::target_columns on the device; a later draft id wins a target id two map to,
/// as the CPU's scatter.
DeviceBuffer target_columns(const Uploader& up, const EagleHeadDef& e, int64_t vocab) {
  const Tensor& t = up.host_tensor(e.d2t_name);
  if (t.dtype != DType::kI64 || t.shape != Shape{e.draft_vocab_size}) {
    throw InvalidArgument(fmt::format("{}: tensor '{}' must be I64 [{}]", up.source_of(e.d2t_name),
                                      e.d2t_name, e.draft_vocab_size));
  }
  std::vector<int32_t> columns(static_cast<size_t>(vocab), -1);
  for (int64_t i = 0; i < e.draft_vocab_size; ++i) {
    const int64_t target = i + t.as<int64_t>()[i];
    if (target < 0 || target >= vocab) {
      throw InvalidArgument(fmt::format("{}: {}[{}] maps draft id {} to {}, outside the vocabulary",
                                        up.source_of(e.d2t_name), e.d2t_name, i, i, target));
    }
    columns[static_cast<size_t>(target)] = static_cast<int32_t>(i);
  }
  DeviceBuffer b(columns.size() * sizeof(int32_t));
  PAGODA_CUDA_CHECK(cudaMemcpy(b.get(), columns.data(), columns.size() * sizeof(int32_t),
                               cudaMemcpyHostToDevice));
  return b;
}

}  // namespace

CudaWeights upload_weights(const ModelDefinition& d, CudaWeightSource source, DType dtype,
                           int device, const RuntimeOptions& options, ThreadPool& pool,
                           cudaStream_t stream) {
  const std::vector<TensorSpec> specs = d.tensors();
  const int64_t embed_rows = source.embed_rows > 0 ? source.embed_rows : d.vocab_size;
  PAGODA_CHECK(embed_rows == d.vocab_size || source.store,
               "a vocabulary slice of dummy weights is drawn on the host");
  Uploader up(specs, std::move(source), dtype, device, options, pool, stream);
  CudaWeights w;
  w.embed = up.alloc(embed_rows * d.hidden_size);
  up.put(d.embed_name, Shape{embed_rows, d.hidden_size}, w.embed.get());
  const bool eagle1 = d.eagle && d.eagle->version == 1;  // no final norm, no first input norm
  if (!eagle1) w.final_norm = up.norm(d.final_norm);
  // Tied checkpoints usually omit lm_head.weight; some write it anyway.
  w.tied = d.lm_head_tied && !up.has(d.lm_head.sources.at(0).prefix + ".weight");
  if (!w.tied) w.lm_head = up.linear(d.lm_head);
  if (d.eagle) {
    w.eagle.fc = up.linear(d.eagle->fc);
    w.eagle.hidden_norm = up.optional_norm(d.eagle->hidden_norm);
    if (!d.eagle->d2t_name.empty())
      w.eagle.target_columns = target_columns(up, *d.eagle, d.vocab_size);
  }
  for (const LayerDef& l : d.layers) {
    CudaLayerWeights lw;
    if (!eagle1) lw.input_norm = up.norm(l.input_norm);
    lw.pre_mlp_norm = up.norm(l.pre_mlp_norm);
    lw.post_attention_norm = up.optional_norm(l.post_attention_norm);
    lw.post_mlp_norm = up.optional_norm(l.post_mlp_norm);
    lw.q_norm = up.optional_norm(l.attention.q_norm);
    lw.k_norm = up.optional_norm(l.attention.k_norm);
    lw.qkv = up.linear(l.qkv);
    lw.o = up.linear(l.o);
    lw.gate_up = up.linear(l.gate_up);
    lw.down = up.linear(l.down);
    w.layers.push_back(std::move(lw));
  }
  up.finish();
  return w;
}

}  // namespace pagoda
