#include "runtime/cuda/cuda_weights.h"

#include <algorithm>
#include <map>

#include "core/logging.h"
#include "kernels/cuda/tensor_ops.h"
#include "model/dummy_weights.h"
#include "model/linear.h"
#include "runtime/cuda/weight_streamer.h"

namespace pagoda {
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
      done_elements_ += n;
      if (source_.progress && total_elements_ > 0) {
        source_.progress(std::min(
            1.0, static_cast<double>(done_elements_) / static_cast<double>(total_elements_)));
      }
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

  /// A dense projection: each source's rows (and bias) at its offset of the stacked weight.
  CudaLinear linear(const LinearDef& def) {
    PAGODA_CHECK(def.format == WeightFormat::kDense, "{}: only dense weights run on the GPU",
                 def.name);
    CudaLinear l;
    l.format = def.format;
    l.dtype = dtype_;
    l.out = def.out();
    l.in = def.in;
    l.weight = alloc(l.out * l.in);
    if (def.bias) l.bias = alloc(l.out);
    const size_t es = dtype_size(dtype_);
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s), first = def.source_offset(s);
      put(s.prefix + ".weight", Shape{rows, def.in},
          l.weight.at(static_cast<size_t>(first * def.in) * es));
      if (def.bias)
        put(s.prefix + ".bias", Shape{rows}, l.bias.at(static_cast<size_t>(first) * es));
    }
    return l;
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
    for (const Offset& o : offsets_)
      PAGODA_CUDA_CHECK(cuda::affine(o.ptr, dtype_, o.count, 1.0f, o.offset, stream_));
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
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
};

}  // namespace

CudaWeights upload_weights(const ModelDefinition& d, CudaWeightSource source, DType dtype,
                           int device, const RuntimeOptions& options, ThreadPool& pool,
                           cudaStream_t stream) {
  const std::vector<TensorSpec> specs = d.tensors();
  Uploader up(specs, std::move(source), dtype, device, options, pool, stream);
  CudaWeights w;
  w.embed = up.alloc(d.vocab_size * d.hidden_size);
  up.put(d.embed_name, Shape{d.vocab_size, d.hidden_size}, w.embed.get());
  w.final_norm = up.norm(d.final_norm);
  // Tied checkpoints usually omit lm_head.weight; some write it anyway.
  w.tied = d.lm_head_tied && !up.has(d.lm_head.sources.at(0).prefix + ".weight");
  if (!w.tied) w.lm_head = up.linear(d.lm_head);
  for (const LayerDef& l : d.layers) {
    CudaLayerWeights lw;
    lw.input_norm = up.norm(l.input_norm);
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
