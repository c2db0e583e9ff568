#include "runtime/cuda/cuda_decoder_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "core/logging.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/tensor_ops.h"
#include "model/dummy_weights.h"
#include "model/loader/safetensors.h"
#include "model/registry.h"
#include "runtime/cuda/decode_graphs.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_sampler.h"
#include "runtime/cuda/host_phases.h"
#include "runtime/cuda/weight_streamer.h"
#include "runtime/env_knobs.h"

namespace pagoda {
namespace {

std::string layer_name(int layer, const char* suffix) {
  return fmt::format("model.layers.{}.{}", layer, suffix);
}

/// Where the weights come from: checkpoint tensors (host, mmapped) or the dummy recipe. Checkpoint
/// tensors are checked when named and copied together at finish(), through weight_streamer.h.
class WeightSource {
 public:
  WeightSource(const ModelConfig& config, const std::vector<ArchitectureEntry::TensorSpec>& specs,
               std::optional<WeightStore> store, uint64_t seed,
               std::function<void(double)> progress, int device, ThreadPool& pool)
      : config_(config),
        specs_(specs),
        store_(std::move(store)),
        seed_(seed),
        progress_(std::move(progress)),
        device_(device),
        pool_(pool) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      index_[specs_[i].name] = i;
      total_elements_ += specs_[i].shape.num_elements();
    }
  }

  [[nodiscard]] bool has(const std::string& name) const {
    return store_ ? store_->contains(name) : index_.count(name) != 0;
  }

  /// Writes tensor `name` (checked against its expected shape) into dst in `dtype`: dummy values
  /// now, checkpoint tensors at finish().
  void upload(const std::string& name, const Shape& shape, void* dst, DType dtype,
              cudaStream_t stream) {
    const int64_t n = shape.num_elements();
    if (!store_) {
      done_elements_ += n;
      if (progress_ && total_elements_ > 0) {
        progress_(std::min(
            1.0, static_cast<double>(done_elements_) / static_cast<double>(total_elements_)));
      }
      const auto it = index_.find(name);
      PAGODA_CHECK(it != index_.end(), "dummy weights have no tensor {}", name);
      const DummyInit init = dummy_init(specs_[it->second], it->second, seed_);
      PAGODA_CUDA_CHECK(
          cuda::fill_uniform(dst, dtype, n, init.seed, init.offset, init.scale, stream));
      return;
    }
    const Tensor& t = store_->get(name);
    if (!(t.shape == shape)) {
      throw InvalidArgument(fmt::format("{}: tensor '{}' has shape {}, expected {}",
                                        store_->source_of(name), name, t.shape.to_string(),
                                        shape.to_string()));
    }
    if (!is_float_weight_dtype(t.dtype)) {
      throw InvalidArgument(
          fmt::format("{}: tensor '{}' has dtype {}, expected float32, bfloat16 or float16",
                      store_->source_of(name), name, dtype_name(t.dtype)));
    }
    pending_.push_back(WeightUpload{t.data, t.dtype, dst, dtype, n});
  }

  /// Copies the checkpoint tensors named so far and waits for every upload.
  void finish(cudaStream_t stream) {
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (pending_.empty()) return;
    stream_weights(pending_, device_, WeightStreamOptions::from_env(pool_.num_threads()), pool_,
                   progress_);
    pending_.clear();
  }

 private:
  const ModelConfig& config_;
  const std::vector<ArchitectureEntry::TensorSpec>& specs_;
  std::optional<WeightStore> store_;
  uint64_t seed_;
  std::function<void(double)> progress_;
  int device_;
  ThreadPool& pool_;
  int64_t total_elements_ = 0, done_elements_ = 0;
  std::map<std::string, size_t> index_;
  std::vector<WeightUpload> pending_;  // checkpoint tensors, in upload order
};

struct LayerWeights {
  DeviceBuffer input_norm, post_attention_norm;
  DeviceBuffer qkv, qkv_bias;  // [q + 2 kv, hidden]: q, k and v stacked (one GEMM)
  DeviceBuffer o, o_bias;
  DeviceBuffer gate_up, gate_up_bias;  // [2 * intermediate, hidden]: gate then up
  DeviceBuffer down, down_bias;
  DeviceBuffer q_norm, k_norm;  // Qwen3: [head_dim]
};

/// Device activations of one step, grown to the largest step seen.
struct Activations {
  int64_t capacity = 0;
  DeviceBuffer residual, hidden, normed, qkv, attn, gate_up, act;

  void reserve(int64_t tokens, const ModelConfig& c, size_t esize) {
    if (tokens <= capacity) return;
    capacity = std::max<int64_t>(tokens, capacity * 2);
    auto buf = [&](int64_t per_token) {
      return DeviceBuffer(static_cast<size_t>(capacity * per_token) * esize);
    };
    residual = buf(c.hidden_size);
    hidden = buf(c.hidden_size);
    normed = buf(c.hidden_size);
    qkv = buf(c.q_size() + 2 * c.kv_size());
    attn = buf(c.q_size());
    gate_up = buf(2 * c.intermediate_size);
    act = buf(c.intermediate_size);
  }
};

/// Device pointers of one step's inputs (see stage_inputs).
struct StepInputs {
  const int64_t* slots;
  const int32_t* ids;
  const int32_t* positions;
  const int32_t* query_start;
  const int32_t* seq_lens;
  const int32_t* block_tables;  // [num_seqs, table_width]
  const int32_t* logits_rows;
  int table_width;
};

/// The decoder on the GPU.
class CudaDecoderModel final : public Model {
 public:
  CudaDecoderModel(const ModelConfig& config, bool qkv_bias, bool o_bias, bool qk_norm, DType dtype,
                   int device, WeightSource& weights, bool cuda_graphs)
      : config_(config),
        qkv_bias_(qkv_bias),
        o_bias_(o_bias),
        qk_norm_(qk_norm),
        dtype_(dtype),
        device_(device) {
    PAGODA_CUDA_CHECK(cudaSetDevice(device_));
    PAGODA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PAGODA_CUDA_CHECK(cuda::blas_context_create(&blas_));
    blas_.gemv_mma_max_m =
        env_int("PAGODA_GEMV_MMA_MAX_M", cuda::kGemvMmaMaxM, 0, cuda::kGemvLimitM);
    blas_.gemv_mma_tuning.row_groups = env_int("PAGODA_GEMV_MMA_ROWS", 2, 1, 4);
    blas_.gemv_mma_tuning.steps_in_flight = env_int("PAGODA_GEMV_MMA_STEPS", 2, 1, 4);
    PAGODA_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device_));
    // Head dims 64 and 128 run the fast attention kernel, the others the general one.
    if (config.head_dim <= 0 || config.head_dim > cuda::kGeneralAttentionMaxHeadDim ||
        config.head_dim % 2 != 0) {
      throw InvalidArgument(
          fmt::format("head_dim {} is not supported on the GPU (an even size up to {})",
                      config.head_dim, cuda::kGeneralAttentionMaxHeadDim));
    }
    upload_weights(weights);
    graphs_enabled_ = cuda_graphs && !env_flag("PAGODA_ENFORCE_EAGER", false);
    tune_blas_ = env_flag("PAGODA_CUBLASLT_TUNING", true);  // off: the heuristic's first choice
    device_sampling_ = !env_flag("PAGODA_HOST_SAMPLING", false);  // A/B against the CPU sampler
    fuse_small_steps_ = !env_flag("PAGODA_DISABLE_GEMV_FUSION", false) &&
                        config.hidden_size % 8 == 0 && config.q_size() % 8 == 0 &&
                        config.intermediate_size % 8 == 0;
    // A/B of the split-KV granularity (attention_plan.cc); the kernel's default otherwise.
    min_split_keys_ = static_cast<int>(
        env_int("PAGODA_ATTENTION_MIN_SPLIT_KEYS", cuda::kDefaultMinSplitKeys, 64, 1 << 20));
    const std::vector<float> inv_freq = rope_inv_freq(config_.rope, config_.head_dim);
    inv_freq_ = DeviceBuffer(inv_freq.size() * sizeof(float));
    PAGODA_CUDA_CHECK(cudaMemcpy(inv_freq_.get(), inv_freq.data(), inv_freq.size() * sizeof(float),
                                 cudaMemcpyHostToDevice));
  }

  ~CudaDecoderModel() override {
    graphs_.clear();
    cuda::blas_context_destroy(&blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (host_inputs_ != nullptr) cudaFreeHost(host_inputs_);
    if (host_logits_ != nullptr) cudaFreeHost(host_logits_);
  }

  const ModelConfig& config() const override { return config_; }

  int64_t kv_cache_bytes_per_token() const override {
    return 2 * static_cast<int64_t>(config_.num_layers) * config_.kv_size() *
           static_cast<int64_t>(dtype_size(dtype_));
  }

  void init_kv_cache(int64_t num_blocks, int block_size) override {
    if (block_size < 1) {
      throw InvalidArgument(fmt::format("--block-size must be positive, got {}", block_size));
    }
    graphs_.clear();
    keys_.clear();
    values_.clear();
    // The attention workspace is planned for the cache shape (it decides the kernel): re-plan
    // when the block size changes. Otherwise it is kept, as the profile run sized it (the engine
    // sizes the pool from what is in use after that run).
    if (layout_.block_size != block_size) {
      limits_ = cuda::AttentionLimits{};
      attention_workspace_ = DeviceBuffer();
    }
    layout_ = cuda::KVCacheLayout{num_blocks, block_size, config_.num_kv_heads, config_.head_dim};
    const size_t bytes = static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size) *
                         static_cast<size_t>(config_.kv_size()) * dtype_size(dtype_);
    // The null block (0) is zeroed: padded graph rows and the warm-up read it, and zeros keep
    // their (discarded) logits finite.
    const size_t null_block_bytes = static_cast<size_t>(block_size) *
                                    static_cast<size_t>(config_.kv_size()) * dtype_size(dtype_);
    for (int l = 0; l < config_.num_layers; ++l) {
      keys_.emplace_back(bytes);
      values_.emplace_back(bytes);
      PAGODA_CUDA_CHECK(cudaMemset(keys_.back().get(), 0, null_block_bytes));
      PAGODA_CUDA_CHECK(cudaMemset(values_.back().get(), 0, null_block_bytes));
    }
  }

  void copy_kv_blocks(std::span<const std::pair<int32_t, int32_t>> src_dst) override {
    const size_t block_bytes = static_cast<size_t>(layout_.block_size) *
                               static_cast<size_t>(config_.kv_size()) * dtype_size(dtype_);
    for (const auto& [src, dst] : src_dst) {
      for (size_t l = 0; l < keys_.size(); ++l) {
        for (DeviceBuffer* b : {&keys_[l], &values_[l]}) {
          PAGODA_CUDA_CHECK(cudaMemcpyAsync(b->at(static_cast<size_t>(dst) * block_bytes),
                                            b->at(static_cast<size_t>(src) * block_bytes),
                                            block_bytes, cudaMemcpyDeviceToDevice, stream_));
        }
      }
    }
  }

  std::span<float> forward(const ForwardBatch& batch) override {
    return forward_sample(batch, {}, {}, {});
  }
  std::span<float> forward_sample(const ForwardBatch& batch, std::span<const DeviceDraw> draws,
                                  std::span<int32_t> tokens,
                                  std::span<DrawnLogprobs> logprobs) override {
    PAGODA_CHECK(start_step(batch, draws), "start_step failed");
    return finish_step(tokens, logprobs);
  }
  bool start_step(const ForwardBatch& batch, std::span<const DeviceDraw> draws) override;
  std::span<float> finish_step(std::span<int32_t> tokens,
                               std::span<DrawnLogprobs> logprobs) override;

  std::vector<int> decode_graph_sizes(int max_num_seqs) const override {
    return graphs_enabled_ ? DecodeGraphs::buckets(max_num_seqs) : std::vector<int>{};
  }

  std::optional<std::pair<size_t, size_t>> device_memory() const override {
    size_t free = 0, total = 0;
    PAGODA_CUDA_CHECK(cudaSetDevice(device_));
    PAGODA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return std::make_pair(free, total);
  }

 private:
  void upload_weights(WeightSource& w);
  StepInputs stage_inputs(const ForwardBatch& batch, int table_width);
  void run_kernels(const StepInputs& in, const cuda::AttentionPlan& plan, int64_t T, int S,
                   int64_t L);
  void linear(const void* x, int64_t m, int64_t k, const DeviceBuffer& w, int64_t n,
              const DeviceBuffer& bias, void* y) {
    PAGODA_CUDA_CHECK(cuda::linear(blas_, x, m, k, w.get(), n, bias.get(), y, dtype_, stream_));
  }
  cuda::GemvFusion fusion(const DeviceBuffer& norm_weight, cuda::GemvEpilogue epilogue) const {
    cuda::GemvFusion f;
    f.norm_weight = norm_weight.get();
    f.norm_eps = static_cast<float>(config_.rms_norm_eps);
    f.epilogue = epilogue;
    return f;
  }
  // The fused projection of a small step: the CUDA-core GEMV at m = 1, the tensor-core one above.
  void gemv_fused(const void* x, int64_t m, int64_t k, const DeviceBuffer& w, int64_t n,
                  const DeviceBuffer& bias, void* y, const cuda::GemvFusion& f) {
    if (m <= cuda::kGemvMaxM) {
      PAGODA_CUDA_CHECK(
          cuda::linear_gemv_fused(x, m, k, w.get(), n, bias.get(), y, f, dtype_, stream_));
    } else {
      PAGODA_CUDA_CHECK(
          cuda::linear_gemv_mma_fused(x, m, k, w.get(), n, bias.get(), y, f, dtype_, stream_));
    }
  }
  // Steps of up to this many tokens run the fused projections (when fuse_small_steps_).
  int64_t fused_max_m() const { return std::max(cuda::kGemvMaxM, blas_.gemv_mma_max_m); }

  ModelConfig config_;
  bool qkv_bias_, o_bias_, qk_norm_;
  DType dtype_;
  int device_;
  int num_sms_ = 132;
  cudaStream_t stream_ = nullptr;
  cuda::BlasContext blas_;
  DeviceBuffer embed_tokens_, lm_head_, final_norm_, inv_freq_;
  bool tied_ = false;
  std::vector<LayerWeights> layers_;
  cuda::KVCacheLayout layout_;
  std::vector<DeviceBuffer> keys_, values_;
  Activations act_;
  // Step inputs: one pinned host area and one device area, copied in one transfer.
  void* host_inputs_ = nullptr;
  size_t host_inputs_bytes_ = 0;
  DeviceBuffer device_inputs_;
  DeviceBuffer logits_dtype_, logits_f32_, gathered_;
  void* host_logits_ = nullptr;  // pinned [rows, vocab] fp32, returned by forward()
  DeviceSampler sampler_;        // rows drawn on the device
  size_t host_logits_elems_ = 0;
  cuda::AttentionLimits limits_;
  DeviceBuffer attention_workspace_;
  bool graphs_enabled_ = true;
  bool device_sampling_ = true;  // PAGODA_HOST_SAMPLING=1: every row goes back to the host
  // Whether steps of at most fused_max_m() tokens run the fused GEMVs (run_kernels): every
  // projection's k a multiple of 8 (the GEMVs' 16-byte loads); PAGODA_DISABLE_GEMV_FUSION=1 turns
  // it off (A/B).
  bool fuse_small_steps_ = false;
  int min_split_keys_ = cuda::kDefaultMinSplitKeys;
  DecodeGraphs graphs_;    // of decode-only steps (PAGODA_ENFORCE_EAGER=1 turns them off)
  bool tune_blas_ = true;  // time cuBLASLt's candidates before a bucket's first capture
  // A decode batch padded to its graph bucket (pad_to_graph_bucket).
  struct PaddedBatch {
    std::vector<int32_t> ids, positions, query_start, seq_lens, tables, rows;
    std::vector<int64_t> slots;
    ForwardBatch batch;
  } padded_;
  const ForwardBatch& pad_to_graph_bucket(const ForwardBatch& b);
  // The step start_step() launched and finish_step() collects.
  struct PendingStep {
    bool active = false;
    int64_t rows = 0;               // logits rows
    size_t logits_elems = 0;        // > 0: the fp32 logits are being copied to host_logits_
    bool sampled = false;           // sampler_ drew some rows
    std::vector<DeviceDraw> draws;  // the rows' draws (for sampler_.collect)
  } pending_;
};

void CudaDecoderModel::upload_weights(WeightSource& w) {
  const ModelConfig& c = config_;
  const size_t es = dtype_size(dtype_);
  auto matrix = [&](int64_t rows, int64_t cols) {
    return DeviceBuffer(static_cast<size_t>(rows * cols) * es);
  };
  auto put = [&](const std::string& name, const Shape& shape, void* dst) {
    w.upload(name, shape, dst, dtype_, stream_);
  };
  embed_tokens_ = matrix(c.vocab_size, c.hidden_size);
  put("model.embed_tokens.weight", Shape{c.vocab_size, c.hidden_size}, embed_tokens_.get());
  final_norm_ = matrix(1, c.hidden_size);
  put("model.norm.weight", Shape{c.hidden_size}, final_norm_.get());
  tied_ = c.tie_word_embeddings && !w.has("lm_head.weight");
  if (!tied_) {
    lm_head_ = matrix(c.vocab_size, c.hidden_size);
    put("lm_head.weight", Shape{c.vocab_size, c.hidden_size}, lm_head_.get());
  }
  const int64_t q = c.q_size(), kv = c.kv_size(), h = c.hidden_size, inter = c.intermediate_size;
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights lw;
    auto name = [&](const char* suffix) { return layer_name(l, suffix); };
    lw.input_norm = matrix(1, h);
    put(name("input_layernorm.weight"), Shape{h}, lw.input_norm.get());
    lw.post_attention_norm = matrix(1, h);
    put(name("post_attention_layernorm.weight"), Shape{h}, lw.post_attention_norm.get());
    lw.qkv = matrix(q + 2 * kv, h);
    put(name("self_attn.q_proj.weight"), Shape{q, h}, lw.qkv.get());
    put(name("self_attn.k_proj.weight"), Shape{kv, h}, lw.qkv.at(static_cast<size_t>(q * h) * es));
    put(name("self_attn.v_proj.weight"), Shape{kv, h},
        lw.qkv.at(static_cast<size_t>((q + kv) * h) * es));
    if (qkv_bias_) {
      lw.qkv_bias = matrix(1, q + 2 * kv);
      put(name("self_attn.q_proj.bias"), Shape{q}, lw.qkv_bias.get());
      put(name("self_attn.k_proj.bias"), Shape{kv}, lw.qkv_bias.at(static_cast<size_t>(q) * es));
      put(name("self_attn.v_proj.bias"), Shape{kv},
          lw.qkv_bias.at(static_cast<size_t>(q + kv) * es));
    }
    lw.o = matrix(h, q);
    put(name("self_attn.o_proj.weight"), Shape{h, q}, lw.o.get());
    if (o_bias_) {
      lw.o_bias = matrix(1, h);
      put(name("self_attn.o_proj.bias"), Shape{h}, lw.o_bias.get());
    }
    lw.gate_up = matrix(2 * inter, h);
    put(name("mlp.gate_proj.weight"), Shape{inter, h}, lw.gate_up.get());
    put(name("mlp.up_proj.weight"), Shape{inter, h},
        lw.gate_up.at(static_cast<size_t>(inter * h) * es));
    lw.down = matrix(h, inter);
    put(name("mlp.down_proj.weight"), Shape{h, inter}, lw.down.get());
    if (c.mlp_bias) {
      lw.gate_up_bias = matrix(1, 2 * inter);
      put(name("mlp.gate_proj.bias"), Shape{inter}, lw.gate_up_bias.get());
      put(name("mlp.up_proj.bias"), Shape{inter},
          lw.gate_up_bias.at(static_cast<size_t>(inter) * es));
      lw.down_bias = matrix(1, h);
      put(name("mlp.down_proj.bias"), Shape{h}, lw.down_bias.get());
    }
    if (qk_norm_) {
      lw.q_norm = matrix(1, c.head_dim);
      put(name("self_attn.q_norm.weight"), Shape{c.head_dim}, lw.q_norm.get());
      lw.k_norm = matrix(1, c.head_dim);
      put(name("self_attn.k_norm.weight"), Shape{c.head_dim}, lw.k_norm.get());
    }
    layers_.push_back(std::move(lw));
  }
  w.finish(stream_);
}

/// Packs the step's index arrays into pinned memory and copies them to the device in one transfer.
/// Device layout (16-byte aligned sections): slots i64[T], ids i32[T], positions i32[T],
/// query_start_loc i32[S+1], seq_lens i32[S], block_tables i32[S*W], logits_indices i32[L], where
/// W >= max_blocks_per_seq is the table width (padded for CUDA graphs, so that a graph's offsets
/// stay fixed while contexts grow).
StepInputs CudaDecoderModel::stage_inputs(const ForwardBatch& b, int table_width) {
  auto align = [](size_t x) { return (x + 15) / 16 * 16; };
  const size_t T = static_cast<size_t>(b.num_tokens()), S = static_cast<size_t>(b.num_seqs());
  const size_t W = static_cast<size_t>(table_width);
  const size_t sizes[] = {
      T * 8, T * 4, T * 4, (S + 1) * 4, S * 4, S * W * 4, b.logits_indices.size() * 4};
  size_t total = 0;
  for (size_t sz : sizes) total += align(sz);
  if (total > host_inputs_bytes_) {
    if (host_inputs_ != nullptr) {
      PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
      cudaFreeHost(host_inputs_);
    }
    host_inputs_bytes_ = std::max(total, 2 * host_inputs_bytes_);
    PAGODA_CUDA_CHECK(cudaMallocHost(&host_inputs_, host_inputs_bytes_));
    device_inputs_ = DeviceBuffer(host_inputs_bytes_);
    graphs_.clear();
  }
  char* host = static_cast<char*>(host_inputs_);
  size_t offset = 0;
  size_t offsets[7];
  for (size_t i = 0; i < 7; ++i) {
    offsets[i] = offset;
    offset += align(sizes[i]);
  }
  std::memcpy(host + offsets[0], b.slot_mapping.data(), sizes[0]);
  std::memcpy(host + offsets[1], b.token_ids.data(), sizes[1]);
  std::memcpy(host + offsets[2], b.positions.data(), sizes[2]);
  std::memcpy(host + offsets[3], b.query_start_loc.data(), sizes[3]);
  if (sizes[4] > 0) std::memcpy(host + offsets[4], b.seq_lens.data(), sizes[4]);
  auto* tables = reinterpret_cast<int32_t*>(host + offsets[5]);
  const size_t src_w = static_cast<size_t>(b.max_blocks_per_seq);
  for (size_t r = 0; r < S; ++r) {
    std::memcpy(tables + r * W, b.block_tables.data() + r * src_w, src_w * 4);
    std::fill(tables + r * W + src_w, tables + (r + 1) * W, 0);
  }
  if (sizes[6] > 0) std::memcpy(host + offsets[6], b.logits_indices.data(), sizes[6]);
  PAGODA_CUDA_CHECK(
      cudaMemcpyAsync(device_inputs_.get(), host_inputs_, total, cudaMemcpyHostToDevice, stream_));
  char* dev = device_inputs_.as<char>();
  return StepInputs{reinterpret_cast<const int64_t*>(dev + offsets[0]),
                    reinterpret_cast<const int32_t*>(dev + offsets[1]),
                    reinterpret_cast<const int32_t*>(dev + offsets[2]),
                    reinterpret_cast<const int32_t*>(dev + offsets[3]),
                    reinterpret_cast<const int32_t*>(dev + offsets[4]),
                    reinterpret_cast<const int32_t*>(dev + offsets[5]),
                    reinterpret_cast<const int32_t*>(dev + offsets[6]),
                    table_width};
}

bool CudaDecoderModel::start_step(const ForwardBatch& batch, std::span<const DeviceDraw> draws) {
  PAGODA_CHECK(!pending_.active, "start_step while a step is in flight");
  PAGODA_CHECK(!keys_.empty(), "forward before init_kv_cache");
  const ModelConfig& c = config_;
  pending_ = PendingStep{};
  if (batch.num_tokens() == 0) {
    pending_.active = true;
    return true;
  }
  // The rows the caller asked for; a decode step padded to its graph bucket has more (below).
  const int64_t real_rows = static_cast<int64_t>(batch.logits_indices.size());
  const ForwardBatch& b = graphs_enabled_ ? pad_to_graph_bucket(batch) : batch;
  const int64_t T = b.num_tokens();
  const int S = b.num_seqs();
  const int64_t L = static_cast<int64_t>(b.logits_indices.size());
  for (int32_t id : b.token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      throw InvalidArgument(
          fmt::format("token id {} is outside the vocabulary [0, {})", id, c.vocab_size));
    }
  }
  PAGODA_CUDA_CHECK(cudaSetDevice(device_));
  const size_t es = dtype_size(dtype_);
  HostPhases phases;

  // A decode-only step (one token per sequence, logits for each) replays a CUDA graph: the ~11
  // kernels per layer then launch without host gaps. Its key fixes every size baked into the
  // kernels' parameters: tokens, the padded block-table width and the attention grid.
  bool graph = graphs_enabled_ && T == S && L == T && T <= DecodeGraphs::kMaxTokens;
  for (int s = 0; graph && s < S; ++s) {
    graph =
        b.query_start_loc[static_cast<size_t>(s) + 1] - b.query_start_loc[static_cast<size_t>(s)] ==
            1 &&
        b.logits_indices[static_cast<size_t>(s)] == s;
  }
  auto pow2 = [](int64_t x) {
    int64_t p = 1;
    while (p < x) p *= 2;
    return p;
  };
  const int table_width = graph ? static_cast<int>(std::max<int64_t>(8, pow2(b.max_blocks_per_seq)))
                                : b.max_blocks_per_seq;

  // Buffers first: a graph bakes their addresses, so any growth invalidates the graphs.
  if (T > act_.capacity) {
    act_.reserve(T, c, es);
    graphs_.clear();
  }
  const size_t gathered_bytes = static_cast<size_t>(L * c.hidden_size) * es;
  const size_t logits_elems = static_cast<size_t>(L) * static_cast<size_t>(c.vocab_size);
  if (gathered_.size() < gathered_bytes || logits_dtype_.size() < logits_elems * es ||
      host_logits_elems_ < logits_elems) {
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (gathered_.size() < gathered_bytes) gathered_ = DeviceBuffer(gathered_bytes * 2);
    if (logits_dtype_.size() < logits_elems * es) {
      logits_dtype_ = DeviceBuffer(logits_elems * es * 2);
      logits_f32_ = DeviceBuffer(logits_elems * sizeof(float) * 2);
    }
    if (host_logits_elems_ < logits_elems) {
      if (host_logits_ != nullptr) cudaFreeHost(host_logits_);
      host_logits_elems_ = logits_elems * 2;
      PAGODA_CUDA_CHECK(cudaMallocHost(&host_logits_, host_logits_elems_ * sizeof(float)));
    }
    graphs_.clear();
  }
  phases.mark();  // buffers
  const StepInputs in = stage_inputs(b, table_width);

  // The attention plan (host), grown until it fits the workspace, then uploaded.
  cuda::AttentionPlan plan;
  cuda::AttentionPlanInput plan_input{
      b.query_start_loc.data(), b.seq_lens.data(), S, c.num_heads, c.num_kv_heads, num_sms_,
      min_split_keys_};
  // One plan serves every layer: it may cut splits to the window only if every layer has it.
  plan_input.sliding_window = c.common_window();
  for (;;) {
    const cudaError_t err = limits_.max_tokens >= T
                                ? cuda::plan_paged_attention(plan_input, limits_, &plan)
                                : cudaErrorInvalidValue;
    if (err == cudaSuccess) break;
    PAGODA_CHECK(err == cudaErrorInvalidValue, "plan_paged_attention: {}", cudaGetErrorString(err));
    PAGODA_CHECK(limits_.max_items < (1 << 26), "attention plan for {} tokens does not fit", T);
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    limits_.head_dim = c.head_dim;
    limits_.block_size = layout_.block_size;
    limits_.max_tokens = std::max<int64_t>(T, 2 * limits_.max_tokens);
    limits_.max_items = std::max(4096, 2 * limits_.max_items);
    limits_.max_partial_slots = std::max(4096, 2 * limits_.max_partial_slots);
    attention_workspace_ = DeviceBuffer(cuda::attention_workspace_bytes(limits_));
    graphs_.clear();
  }
  if (graph) {
    // Fixed grids (blocks past the uploaded item counts exit), rounded up so that one graph
    // serves the plans of many steps.
    plan.decode_grid =
        static_cast<int>(std::min<int64_t>(pow2(std::max(plan.decode_grid, 1)), limits_.max_items));
    graph = plan.prefill_grid == 0;
  }
  PAGODA_CUDA_CHECK(
      cuda::upload_attention_plan(plan, limits_, attention_workspace_.get(), stream_));
  phases.mark();  // inputs and attention plan

  if (!graph) {
    run_kernels(in, plan, T, S, L);
  } else {
    if (tune_blas_ && !graphs_.captured(T)) {
      // A bucket's first capture (at start-up): the step runs once eagerly first, with cuBLASLt
      // timing its candidates for each new shape, so that the graph bakes in the fastest. The
      // step is a pure function of its inputs and the KV writes repeat the same values.
      blas_.tune_new_plans = true;
      run_kernels(in, plan, T, S, L);
      blas_.tune_new_plans = false;
    }
    graphs_.launch({T, table_width, plan.decode_grid}, stream_,
                   [&] { run_kernels(in, plan, T, S, L); });
  }
  phases.mark();  // kernels or graph
  pending_.active = true;
  pending_.rows = real_rows;
  if (real_rows == 0) return true;
  // Rows drawn on the device send back one token id each; only if some row needs its logits are
  // all of them converted and copied (a [rows, 128k] fp32 copy is the largest transfer of a step).
  bool any_draw = false, any_logits = draws.size() != static_cast<size_t>(real_rows);
  for (const DeviceDraw& d : draws)
    (d.temperature >= 0 && device_sampling_ ? any_draw : any_logits) = true;
  if (any_draw) {
    // The processed rows go to logits_f32_ (the host copy below converts the raw rows afresh).
    const auto rows = draws.first(std::min(draws.size(), static_cast<size_t>(real_rows)));
    if (sampler_.launch(logits_dtype_.get(), dtype_, c.vocab_size, rows, logits_f32_.as<float>(),
                        stream_)) {
      pending_.sampled = true;
      // collect() reads each draw's temperature and num_logprobs only, never its spans (which
      // the engine may free before finish_step).
      pending_.draws.assign(rows.begin(), rows.end());
    }
  }
  if (!any_logits) {
    phases.log(T, graph);
    return true;
  }
  // The caller's rows only (a padded decode step's extra rows come last).
  const size_t real_elems = static_cast<size_t>(real_rows) * static_cast<size_t>(c.vocab_size);
  PAGODA_CUDA_CHECK(cuda::convert(logits_dtype_.get(), dtype_, logits_f32_.get(), DType::kF32,
                                  static_cast<int64_t>(real_elems), stream_));
  // Pinned host memory: the copy runs at full PCIe speed and the caller reads it in place.
  PAGODA_CUDA_CHECK(cudaMemcpyAsync(host_logits_, logits_f32_.get(), real_elems * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream_));
  pending_.logits_elems = real_elems;
  phases.log(T, graph);
  return true;
}

/// Decode-step graphs are captured per batch-size bucket (1, 2, 4, 8, then multiples of 8 up to
/// DecodeGraphs::kMaxTokens, as vLLM's capture sizes): a decode batch of T sequences runs as the
/// bucket's size, the extra sequences being one token at position 0 that writes no KV (slot -1),
/// reads the null block 0 and whose rows nobody samples. Without buckets every distinct T captured
/// its own graph mid-serving (~ms each) as requests came and went.
const ForwardBatch& CudaDecoderModel::pad_to_graph_bucket(const ForwardBatch& b) {
  const int64_t T = b.num_tokens();
  const int S = b.num_seqs();
  if (T != S || static_cast<int64_t>(b.logits_indices.size()) != T || T > DecodeGraphs::kMaxTokens)
    return b;
  for (int s = 0; s < S; ++s) {
    if (b.query_start_loc[static_cast<size_t>(s) + 1] - b.query_start_loc[static_cast<size_t>(s)] !=
            1 ||
        b.logits_indices[static_cast<size_t>(s)] != s)
      return b;
  }
  const int64_t bucket = DecodeGraphs::bucket(T);
  if (bucket == T) return b;
  const auto n = static_cast<size_t>(bucket);
  const size_t width = static_cast<size_t>(std::max(b.max_blocks_per_seq, 1));
  padded_.ids.assign(b.token_ids.begin(), b.token_ids.end());
  padded_.ids.resize(n, 0);
  padded_.positions.assign(b.positions.begin(), b.positions.end());
  padded_.positions.resize(n, 0);
  padded_.query_start.resize(n + 1);
  for (size_t i = 0; i <= n; ++i) padded_.query_start[i] = static_cast<int32_t>(i);
  padded_.seq_lens.assign(b.seq_lens.begin(), b.seq_lens.end());
  padded_.seq_lens.resize(n, 1);
  padded_.tables.assign(b.block_tables.begin(), b.block_tables.end());
  padded_.tables.resize(n * width, 0);  // block 0: the null block
  padded_.slots.assign(b.slot_mapping.begin(), b.slot_mapping.end());
  padded_.slots.resize(n, -1);
  padded_.rows.resize(n);
  for (size_t i = 0; i < n; ++i) padded_.rows[i] = static_cast<int32_t>(i);
  padded_.batch =
      ForwardBatch{padded_.ids,    padded_.positions,       padded_.query_start, padded_.seq_lens,
                   padded_.tables, static_cast<int>(width), padded_.slots,       padded_.rows};
  return padded_.batch;
}

std::span<float> CudaDecoderModel::finish_step(std::span<int32_t> tokens,
                                               std::span<DrawnLogprobs> logprobs) {
  PAGODA_CHECK(pending_.active, "finish_step without start_step");
  pending_.active = false;
  std::fill(tokens.begin(), tokens.end(), -1);
  PAGODA_CUDA_CHECK(cudaSetDevice(device_));
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (pending_.rows == 0) return {};
  if (pending_.sampled) {
    PAGODA_CHECK(tokens.size() >= pending_.draws.size(), "finish_step: {} token slots for {} rows",
                 tokens.size(), pending_.draws.size());
    sampler_.collect(pending_.draws, tokens, logprobs);
  }
  if (pending_.logits_elems == 0) return {};
  return {static_cast<float*>(host_logits_), pending_.logits_elems};
}

/// The kernel sequence of one step, from the embedding to the logits in pinned host memory. It
/// only launches work on stream_ (no allocation, no host synchronisation), so it can be captured.
void CudaDecoderModel::run_kernels(const StepInputs& in, const cuda::AttentionPlan& plan, int64_t T,
                                   int S, int64_t L) {
  const ModelConfig& c = config_;
  const size_t es = dtype_size(dtype_);
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  const int64_t qkv_width = q + 2 * kv;
  const float eps = static_cast<float>(c.rms_norm_eps);
  void* residual = act_.residual.get();
  void* hidden = act_.hidden.get();
  void* normed = act_.normed.get();
  char* qkv = act_.qkv.as<char>();
  // Small steps (decode at batch 1-8) fold the norms, residual adds and SiLU-and-mul into the
  // GEMVs: 6 kernels per layer instead of 10 (with the RoPE below). The residual stream is then
  // always complete in `residual`; otherwise the last projection's output waits in `hidden` for the
  // next add_rms_norm.
  const bool fused = fuse_small_steps_ && T <= fused_max_m();
  // ... and RoPE with the cache write into the qkv GEMV, unless the per-head q/k norms (Qwen3) must
  // come between them (rope_and_cache does those norms itself). The CUDA-core GEMV takes the pairs
  // (i, i + head_dim / 2) two by two (head_dim % 4 == 0), the tensor-core one 16 by 16 (% 32).
  const bool fused_rope =
      fused && !qk_norm_ && c.head_dim % 4 == 0 && (T <= cuda::kGemvMaxM || c.head_dim % 32 == 0);

  PAGODA_CUDA_CHECK(
      cuda::embedding(in.ids, T, embed_tokens_.get(), c.vocab_size, h, residual, dtype_, stream_));
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = layers_[static_cast<size_t>(l)];
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
        f.rope.num_heads = c.num_heads;
      }
      gemv_fused(residual, T, h, w.qkv, qkv_width, w.qkv_bias, qkv, f);
    } else {
      if (l == 0) {
        PAGODA_CUDA_CHECK(
            cuda::rms_norm(residual, w.input_norm.get(), T, h, eps, normed, dtype_, stream_));
      } else {
        PAGODA_CUDA_CHECK(cuda::add_rms_norm(residual, hidden, w.input_norm.get(), T, h, eps,
                                             normed, dtype_, stream_));
      }
      linear(normed, T, h, w.qkv, qkv_width, w.qkv_bias, qkv);
    }
    void* q_ptr = qkv;
    void* k_ptr = qkv + static_cast<size_t>(q) * es;
    cuda::RopeCacheParams rp;
    rp.q = q_ptr;
    rp.k = k_ptr;
    rp.v = qkv + static_cast<size_t>(q + kv) * es;
    rp.q_stride = qkv_width;
    rp.k_stride = qkv_width;
    rp.v_stride = qkv_width;
    rp.positions = in.positions;
    rp.inv_freq = inv_freq_.as<float>();
    rp.slot_mapping = in.slots;
    rp.key_cache = keys_[static_cast<size_t>(l)].get();
    rp.value_cache = values_[static_cast<size_t>(l)].get();
    rp.num_tokens = T;
    rp.num_heads = c.num_heads;
    rp.layout = layout_;
    rp.dtype = dtype_;
    if (qk_norm_) {  // Qwen3: per-head RMSNorm of q and k, inside the RoPE kernel
      rp.q_norm = w.q_norm.get();
      rp.k_norm = w.k_norm.get();
      rp.norm_eps = eps;
    }
    if (!fused_rope) PAGODA_CUDA_CHECK(cuda::rope_and_cache(rp, stream_));  // else: in the GEMV

    cuda::PagedAttentionParams ap;
    ap.q = q_ptr;
    ap.q_stride = qkv_width;
    ap.positions = in.positions;
    ap.query_start_loc = in.query_start;
    ap.seq_lens = in.seq_lens;
    ap.block_tables = in.block_tables;
    ap.key_cache = keys_[static_cast<size_t>(l)].get();
    ap.value_cache = values_[static_cast<size_t>(l)].get();
    ap.out = act_.attn.get();
    ap.num_tokens = T;
    ap.num_seqs = S;
    ap.num_heads = c.num_heads;
    ap.max_blocks_per_seq = in.table_width;
    ap.sliding_window = c.layer_window(l);
    ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    ap.layout = layout_;
    ap.dtype = dtype_;
    PAGODA_CUDA_CHECK(
        cuda::paged_attention(ap, plan, limits_, attention_workspace_.get(), stream_));

    if (fused) {
      // The residual stream is updated in place by the o and down projections; the MLP's norm
      // and SiLU-and-mul run inside the gate/up projection.
      gemv_fused(act_.attn.get(), T, q, w.o, h, w.o_bias, residual,
                 fusion(DeviceBuffer(), cuda::GemvEpilogue::kAccumulate));
      gemv_fused(residual, T, h, w.gate_up, 2 * inter, w.gate_up_bias, act_.act.get(),
                 fusion(w.post_attention_norm, cuda::GemvEpilogue::kGatedSilu));
      gemv_fused(act_.act.get(), T, inter, w.down, h, w.down_bias, residual,
                 fusion(DeviceBuffer(), cuda::GemvEpilogue::kAccumulate));
      continue;
    }
    linear(act_.attn.get(), T, q, w.o, h, w.o_bias, hidden);
    PAGODA_CUDA_CHECK(cuda::add_rms_norm(residual, hidden, w.post_attention_norm.get(), T, h, eps,
                                         normed, dtype_, stream_));
    linear(normed, T, h, w.gate_up, 2 * inter, w.gate_up_bias, act_.gate_up.get());
    PAGODA_CUDA_CHECK(cuda::silu_and_mul(act_.gate_up.get(),
                                         act_.gate_up.at(static_cast<size_t>(inter) * es), T, inter,
                                         2 * inter, act_.act.get(), dtype_, stream_));
    linear(act_.act.get(), T, inter, w.down, h, w.down_bias, hidden);
  }
  if (L == 0) return;
  if (fused) {
    PAGODA_CUDA_CHECK(
        cuda::rms_norm(residual, final_norm_.get(), T, h, eps, normed, dtype_, stream_));
  } else {
    PAGODA_CUDA_CHECK(cuda::add_rms_norm(residual, hidden, final_norm_.get(), T, h, eps, normed,
                                         dtype_, stream_));
  }
  // Only the rows whose logits are wanted go through the LM head.
  PAGODA_CUDA_CHECK(cuda::gather_rows(normed, in.logits_rows, L, h * static_cast<int64_t>(es),
                                      gathered_.get(), stream_));
  linear(gathered_.get(), L, h, tied_ ? embed_tokens_ : lm_head_, c.vocab_size, DeviceBuffer(),
         logits_dtype_.get());
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::unique_ptr<Model> load_cuda_model(const std::string& model_dir, const LoadOptions& options,
                                       int device, ThreadPool& pool) {
  const ModelConfig config = load_model_config(model_dir);
  const std::string config_path = (std::filesystem::path(model_dir) / "config.json").string();
  const ArchitectureEntry& entry =
      ArchitectureRegistry::global().find(config.architecture, config_path);
  const std::vector<ArchitectureEntry::TensorSpec> specs = entry.expected_tensors(config);
  std::optional<WeightStore> store;
  if (options.format == LoadFormat::kSafetensors) store = WeightStore::open_directory(model_dir);
  const DType dtype =
      options.dtype.value_or(config.dtype == DType::kF16 ? DType::kF16 : DType::kBF16);
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    throw InvalidArgument(fmt::format(
        "--dtype {} is not supported on the GPU (bfloat16 or float16)", dtype_name(dtype)));
  }
  // The variant flags follow from which tensors the architecture expects.
  auto expects = [&](const std::string& suffix) {
    return std::any_of(specs.begin(), specs.end(),
                       [&](const auto& s) { return s.name == layer_name(0, suffix.c_str()); });
  };
  const bool qkv_bias = expects("self_attn.q_proj.bias");
  const bool o_bias = expects("self_attn.o_proj.bias");
  const bool qk_norm = expects("self_attn.q_norm.weight");
  WeightSource source(config, specs, std::move(store), options.seed, options.progress, device,
                      pool);
  spdlog::info("model {}: {} with {} layers on GPU {} in {}", model_dir, config.architecture,
               config.num_layers, device, dtype_name(dtype));
  return std::make_unique<CudaDecoderModel>(config, qkv_bias, o_bias, qk_norm, dtype, device,
                                            source, options.cuda_graphs);
}

}  // namespace pagoda
