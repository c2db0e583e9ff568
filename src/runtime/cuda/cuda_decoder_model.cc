#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/half.h"
#include "core/logging.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_ops.h"
#include "kv/kv_cache_spec.h"
#include "runtime/cuda/cuda_decoder.h"
#include "runtime/cuda/cuda_decoder_model.h"
#include "runtime/cuda/host_phases.h"
#include "runtime/cuda/tuning_cache.h"

namespace pagoda {
namespace {

/// The tokens per sequence of a step that a decode graph can run: every sequence computes the same
/// q tokens, q <= DecodeGraphs::kMaxTokensPerSeq, and every token has a logits row in order; 0
/// otherwise. Plain decodes have q = 1, speculative verification of k drafts q = 1 + k, an EAGLE
/// head's pass one token per sequence (or its catch-up's few). Hidden layers are part of the
/// graph (DecodeGraphs::Shape).
int graph_tokens_per_seq(const ForwardBatch& b) {
  const int64_t T = b.num_tokens();
  const int S = b.num_seqs();
  if (S == 0 || T % S != 0 || static_cast<int64_t>(b.logits_indices.size()) != T ||
      T > DecodeGraphs::kMaxTokens)
    return 0;
  const auto q = static_cast<int>(T / S);
  if (q > DecodeGraphs::kMaxTokensPerSeq) return 0;
  for (int s = 0; s <= S; ++s) {
    if (b.query_start_loc[static_cast<size_t>(s)] != s * q) return 0;
  }
  for (int64_t r = 0; r < T; ++r) {
    if (b.logits_indices[static_cast<size_t>(r)] != r) return 0;
  }
  return q;
}

}  // namespace

void CudaActivations::reserve(int64_t tokens, const ModelDefinition& d, size_t esize) {
  if (tokens <= capacity) return;
  capacity = std::max<int64_t>(tokens, capacity * 2);
  int64_t q = 0, qkv_width = 0, inter = 0;
  for (const LayerDef& l : d.layers) {
    q = std::max(q, l.attention.q_size());
    qkv_width = std::max(qkv_width, l.qkv.out());
    inter = std::max(inter, l.gate_up.out_segments[0]);
  }
  auto buf = [&](int64_t per_token) {
    return DeviceBuffer(static_cast<size_t>(capacity * per_token) * esize);
  };
  residual = buf(d.hidden_size);
  hidden = buf(d.hidden_size);
  normed = buf(d.hidden_size);
  qkv = buf(qkv_width);
  attn = buf(q);
  gate_up = buf(2 * inter);
  act = buf(inter);
  int64_t fp8_in = 0;  // the widest input of an FP8 projection
  for (const LayerDef& l : d.layers) {
    for (const LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      if (lin->format == WeightFormat::kFp8 || lin->format == WeightFormat::kFp8Online)
        fp8_in = std::max(fp8_in, lin->in);
    }
  }
  if (fp8_in > 0) {
    fp8_x = DeviceBuffer(static_cast<size_t>(capacity * fp8_in));
    fp8_scale = DeviceBuffer(static_cast<size_t>(capacity) * sizeof(float));
  }
  int64_t int8_in = 0, int8_out = 0;  // the widest input and output of an INT8 projection
  for (const LayerDef& l : d.layers) {
    for (const LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      if (lin->format != WeightFormat::kInt8) continue;
      int8_in = std::max(int8_in, lin->in);
      int8_out = std::max(int8_out, lin->out());
    }
  }
  if (int8_in > 0) {
    int8_x = DeviceBuffer(static_cast<size_t>(capacity * int8_in));
    int8_scale = DeviceBuffer(static_cast<size_t>(capacity) * sizeof(float));
    // Steps past the GEMV (m > kInt8GemvMaxM): the GEMM's int32 product, kInt8GemmRows at a time.
    if (capacity > cuda::kInt8GemvMaxM) {
      int8_acc =
          DeviceBuffer(static_cast<size_t>(std::min(capacity, cuda::kInt8GemmRows) * int8_out) *
                       sizeof(int32_t));
    }
  }
  int64_t w4_in = 0, w4_weight = 0;  // the widest act-order input, the largest W4 weight
  for (const LayerDef& l : d.layers) {
    for (const LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      if (lin->format != WeightFormat::kGptq && lin->format != WeightFormat::kAwq) continue;
      w4_weight = std::max(w4_weight, lin->out() * lin->in);
      if (lin->quant.desc_act) w4_in = std::max(w4_in, lin->in);
    }
  }
  if (w4_in > 0 && w4_x.get() == nullptr)
    w4_x = DeviceBuffer(static_cast<size_t>(cuda::kW4GemvMaxM * w4_in) * esize);
  if (w4_weight > 0 && w4_dense.get() == nullptr)
    w4_dense = DeviceBuffer(static_cast<size_t>(w4_weight) * esize);
  if (d.eagle) {
    eagle_in_f32 = DeviceBuffer(static_cast<size_t>(capacity * d.eagle->fc.in) * sizeof(float));
    eagle_in = buf(d.eagle->fc.in);
    eagle_cat = buf(std::max(2 * d.hidden_size, d.eagle->fc.in));
  }
}

CudaDecoderModel::CudaDecoderModel(const ModelConfig& config, ModelDefinition definition,
                                   const CudaDTypes& dtypes, const CudaRank& rank,
                                   CudaWeightSource weights, const RuntimeOptions& options,
                                   ThreadPool& pool)
    : config_(config),
      def_(std::move(definition)),
      dtype_(dtypes.activations),
      device_(rank.placement.device),
      options_(options),
      tp_(rank.tp),
      vocab_(vocab_shard(def_.vocab_size, rank.tp.rank, rank.tp.world)),
      ranks_on_device_(rank.placement.ranks_on_device) {
  PAGODA_CUDA_CHECK(cudaSetDevice(device_));
  PAGODA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  PAGODA_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_copied_, cudaEventDisableTiming));
  make_communicator(rank);
  PAGODA_CUDA_CHECK(cuda::blas_context_create(&blas_));
  cuda::set_dependent_launch(options_.dependent_launch);
  blas_.gemv_mma_max_m =
      options_.gemv_mma_max_m >= 0 ? options_.gemv_mma_max_m : cuda::kGemvMmaMaxM;
  blas_.gemv_mma_tuning.row_groups = options_.gemv_mma_rows;
  blas_.gemv_mma_tuning.steps_in_flight = options_.gemv_mma_steps;
  PAGODA_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device_));
  cudaDeviceProp prop{};
  PAGODA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  device_signature_ = fmt::format("{}/sm{}{}/{}sm/cublasLt{}", prop.name, prop.major, prop.minor,
                                  num_sms_, cublasLtGetVersion());
  cuda::blas_add_tuned_choices(&blas_,
                               TuningCache(options_.cublaslt_tuning_cache).load(device_signature_));
  PAGODA_CHECK(!def_.layers.empty(), "{}: a model without layers", def_.architecture);
  const AttentionDef& a = def_.layers[0].attention;
  for (const LayerDef& l : def_.layers) {
    // Head dims 64 and 128 run the fast attention kernel, the others the general one.
    if (l.attention.head_dim <= 0 || l.attention.head_dim > cuda::kGeneralAttentionMaxHeadDim ||
        l.attention.head_dim % 2 != 0) {
      throw InvalidArgument(
          fmt::format("head_dim {} is not supported on the GPU (an even size up to {})",
                      l.attention.head_dim, cuda::kGeneralAttentionMaxHeadDim));
    }
    PAGODA_CHECK(l.attention.num_kv_heads == a.num_kv_heads && l.attention.head_dim == a.head_dim &&
                     l.attention.num_heads == a.num_heads,
                 "{}: layers with different attention shapes are not supported", def_.architecture);
  }
  kv_spec_ = kv::KVCacheSpec{static_cast<int>(def_.layers.size()), a.num_kv_heads, a.head_dim,
                             dtypes.kv_cache, kv::KVLayout::kHeadMajor};
  if (kv::kv_cache_dtype_scaled(dtypes.kv_cache)) {
    std::vector<float> scales(2 * def_.layers.size(), 1.0f);
    for (size_t l = 0; l < dtypes.kv_scales.size() && l < def_.layers.size(); ++l) {
      scales[2 * l] = dtypes.kv_scales[l].k;
      scales[2 * l + 1] = dtypes.kv_scales[l].v;
    }
    kv_scales_ = DeviceBuffer(scales.size() * sizeof(float));
    PAGODA_CUDA_CHECK(cudaMemcpy(kv_scales_.get(), scales.data(), scales.size() * sizeof(float),
                                 cudaMemcpyHostToDevice));
  }
  w_ = upload_weights(def_, std::move(weights), dtype_, device_, options_, pool, stream_);
  bool k_aligned = def_.hidden_size % 8 == 0;
  for (const LayerDef& l : def_.layers)
    k_aligned = k_aligned && l.o.in % 8 == 0 && l.down.in % 8 == 0;
  // An EAGLE head's layer 0 reads fc's output, not a normed residual: the unfused kernels.
  fuse_small_steps_ =
      options_.gemv_fusion && def_.is_plain_llama_block() && k_aligned && !def_.eagle;
  for (const CudaLayerWeights& l : w_.layers)
    fp8_ = fp8_ || l.qkv.fp8() || l.o.fp8() || l.gate_up.fp8() || l.down.fp8();
  for (const CudaLayerWeights& l : w_.layers)
    int8_ = int8_ || l.qkv.int8() || l.o.int8() || l.gate_up.int8() || l.down.int8();
  for (const CudaLayerWeights& l : w_.layers)
    w4_ = w4_ || l.qkv.w4() || l.o.w4() || l.gate_up.w4() || l.down.w4();
  // Gemma multiplies the embeddings by sqrt(hidden) rounded to the activation dtype.
  embed_scale_ = def_.embed_scale;
  if (def_.embed_scale_in_activation_dtype) {
    embed_scale_ = dtype_ == DType::kBF16 ? bf16_to_float(float_to_bf16(embed_scale_))
                                          : f16_to_float(float_to_f16(embed_scale_));
  }
  inv_freq_ = DeviceBuffer(def_.rope_inv_freq.size() * sizeof(float));
  PAGODA_CUDA_CHECK(cudaMemcpy(inv_freq_.get(), def_.rope_inv_freq.data(),
                               def_.rope_inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
}

CudaDecoderModel::~CudaDecoderModel() {
  comm_.reset();  // it uses stream_
  graphs_.clear();
  cuda::blas_context_destroy(&blas_);
  if (inputs_copied_ != nullptr) cudaEventDestroy(inputs_copied_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (host_inputs_ != nullptr) cudaFreeHost(host_inputs_);
  if (host_logits_ != nullptr) cudaFreeHost(host_logits_);
  if (host_hidden_ != nullptr) cudaFreeHost(host_hidden_);
}

void CudaDecoderModel::reserve_hidden(size_t device, size_t convert, size_t host) {
  const size_t es = dtype_size(dtype_);
  if (hidden_dev_.size() < device * es) {
    // The graphs bake hidden_dev_'s address (their hidden-state copies): grown geometrically, so
    // that prefills of growing sizes drop them a few times only.
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    hidden_dev_ = DeviceBuffer(std::max(device * es, 2 * hidden_dev_.size()));
    graphs_.clear();
  }
  if (hidden_f32_.size() < convert * sizeof(float)) {
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    hidden_f32_ = DeviceBuffer(convert * sizeof(float));
  }
  if (host_hidden_capacity_ < host) {
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (host_hidden_ != nullptr) cudaFreeHost(host_hidden_);
    PAGODA_CUDA_CHECK(cudaMallocHost(&host_hidden_, host * sizeof(float)));
    host_hidden_capacity_ = host;
  }
}

std::optional<DeviceHidden> CudaDecoderModel::device_hidden_states() const {
  DeviceHidden d;
  d.dtype = dtype_;
  d.device = device_;
  d.layers = static_cast<int>(hidden_layers_.size());
  d.layer_stride = hidden_stride_;
  d.hidden = def_.hidden_size;
  if (d.layers > 0) d.data = hidden_dev_.get();
  return d;
}

void CudaDecoderModel::end_warm_up() {
  if (cuda::blas_timed_shapes(blas_) == 0) return;  // nothing new learned
  TuningCache(options_.cublaslt_tuning_cache)
      .save(device_signature_, cuda::blas_tuned_choices(blas_));
}

void CudaDecoderModel::init_kv_cache(int64_t num_blocks, int block_size) {
  if (block_size < 1) {
    throw InvalidArgument(fmt::format("--block-size must be positive, got {}", block_size));
  }
  graphs_.clear();
  keys_.clear();
  values_.clear();
  // The attention workspace is planned for the cache shape (it decides the kernel): re-plan when
  // the block size changes. Otherwise it is kept, as the profile run sized it (the engine sizes
  // the pool from what is in use after that run).
  if (layout_.block_size != block_size) {
    limits_ = cuda::AttentionLimits{};
    attention_workspace_ = DeviceBuffer();
  }
  layout_ = cuda::KVCacheLayout{num_blocks, block_size, kv_spec_.num_kv_heads, kv_spec_.head_dim};
  block_size_ = block_size;
  // Plans keep 128-row unsplit prefill items for the Hopper kernel when every layer can run it.
  hopper_prefill_ = options_.hopper_attention;
  for (const auto& layer : def_.layers)
    hopper_prefill_ =
        hopper_prefill_ &&
        cuda::hopper_prefill_available(layout_, dtype_, kv_spec_.dtype, layer.attention.softcap);
  const auto block_bytes = static_cast<size_t>(kv_spec_.layer_block_bytes(block_size));
  // The null block (0) is zeroed: padded graph rows and the warm-up read it, and zeros keep their
  // (discarded) logits finite.
  for (int l = 0; l < kv_spec_.num_layers; ++l) {
    keys_.emplace_back(static_cast<size_t>(num_blocks) * block_bytes);
    values_.emplace_back(static_cast<size_t>(num_blocks) * block_bytes);
    PAGODA_CUDA_CHECK(cudaMemset(keys_.back().get(), 0, block_bytes));
    PAGODA_CUDA_CHECK(cudaMemset(values_.back().get(), 0, block_bytes));
  }
}

void CudaDecoderModel::copy_kv_blocks(std::span<const std::pair<int32_t, int32_t>> src_dst) {
  const auto block_bytes = static_cast<size_t>(kv_spec_.layer_block_bytes(block_size_));
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

void CudaDecoderModel::export_kv_block(int32_t block, std::span<std::byte> out) {
  const auto layer_bytes = static_cast<size_t>(kv_spec_.layer_block_bytes(block_size_));
  PAGODA_CHECK(
      block >= 0 && block < layout_.num_blocks && out.size() == 2 * layer_bytes * keys_.size(),
      "export_kv_block {}: {} bytes", block, out.size());
  PAGODA_CUDA_CHECK(cudaSetDevice(device_));
  std::byte* dst = out.data();
  for (size_t l = 0; l < keys_.size(); ++l) {
    for (const DeviceBuffer* b : {&keys_[l], &values_[l]}) {
      PAGODA_CUDA_CHECK(cudaMemcpyAsync(dst, b->at(static_cast<size_t>(block) * layer_bytes),
                                        layer_bytes, cudaMemcpyDeviceToHost, stream_));
      dst += layer_bytes;
    }
  }
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaDecoderModel::import_kv_block(int32_t block, std::span<const std::byte> in) {
  const auto layer_bytes = static_cast<size_t>(kv_spec_.layer_block_bytes(block_size_));
  PAGODA_CHECK(
      block >= 0 && block < layout_.num_blocks && in.size() == 2 * layer_bytes * keys_.size(),
      "import_kv_block {}: {} bytes", block, in.size());
  PAGODA_CUDA_CHECK(cudaSetDevice(device_));
  const std::byte* src = in.data();
  for (size_t l = 0; l < keys_.size(); ++l) {
    for (DeviceBuffer* b : {&keys_[l], &values_[l]}) {
      PAGODA_CUDA_CHECK(cudaMemcpyAsync(b->at(static_cast<size_t>(block) * layer_bytes), src,
                                        layer_bytes, cudaMemcpyHostToDevice, stream_));
      src += layer_bytes;
    }
  }
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::optional<std::pair<size_t, size_t>> CudaDecoderModel::device_memory() const {
  size_t free = 0, total = 0;
  PAGODA_CUDA_CHECK(cudaSetDevice(device_));
  PAGODA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  // Ranks sharing the GPU (-tp N on fewer GPUs) each report their share of it, so that the
  // engine's budget (utilization x total - in use) is split evenly: with k ranks, total / k and
  // free / k give each rank (utilization x total - in use) / k.
  const auto k = static_cast<size_t>(ranks_on_device_);
  return std::make_pair(free / k, total / k);
}

/// Packs the step's index arrays into pinned memory and copies them to the device in one transfer.
/// Device layout (16-byte aligned sections): slots i64[T], ids i32[T], positions i32[T],
/// query_start_loc i32[S+1], seq_lens i32[S], block_tables i32[S*W], logits_indices i32[L], where
/// W >= max_blocks_per_seq is the table width (padded for CUDA graphs, so that a graph's offsets
/// stay fixed while contexts grow), then an EAGLE head's input rows i32[R] and a chained pass's
/// id rows i32[I] (R, I: the caller's tokens, or 0).
StepInputs CudaDecoderModel::stage_inputs(const ForwardBatch& b, int table_width,
                                          std::span<const int32_t> hidden_rows,
                                          std::span<const int32_t> id_rows) {
  auto align = [](size_t x) { return (x + 15) / 16 * 16; };
  const size_t T = static_cast<size_t>(b.num_tokens()), S = static_cast<size_t>(b.num_seqs());
  const size_t W = static_cast<size_t>(table_width);
  const size_t sizes[] = {T * 8,
                          T * 4,
                          T * 4,
                          (S + 1) * 4,
                          S * 4,
                          S * W * 4,
                          b.logits_indices.size() * 4,
                          hidden_rows.size() * 4,
                          id_rows.size() * 4};
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
  // A queued step may still be copying from the host area (chained passes): wait for that copy.
  PAGODA_CUDA_CHECK(cudaEventSynchronize(inputs_copied_));
  char* host = static_cast<char*>(host_inputs_);
  size_t offset = 0;
  size_t offsets[9];
  for (size_t i = 0; i < 9; ++i) {
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
  if (sizes[7] > 0) std::memcpy(host + offsets[7], hidden_rows.data(), sizes[7]);
  if (sizes[8] > 0) std::memcpy(host + offsets[8], id_rows.data(), sizes[8]);
  PAGODA_CUDA_CHECK(
      cudaMemcpyAsync(device_inputs_.get(), host_inputs_, total, cudaMemcpyHostToDevice, stream_));
  PAGODA_CUDA_CHECK(cudaEventRecord(inputs_copied_, stream_));
  char* dev = device_inputs_.as<char>();
  return StepInputs{reinterpret_cast<const int64_t*>(dev + offsets[0]),
                    reinterpret_cast<const int32_t*>(dev + offsets[1]),
                    reinterpret_cast<const int32_t*>(dev + offsets[2]),
                    reinterpret_cast<const int32_t*>(dev + offsets[3]),
                    reinterpret_cast<const int32_t*>(dev + offsets[4]),
                    reinterpret_cast<const int32_t*>(dev + offsets[5]),
                    reinterpret_cast<const int32_t*>(dev + offsets[6]),
                    sizes[7] > 0 ? reinterpret_cast<const int32_t*>(dev + offsets[7]) : nullptr,
                    sizes[8] > 0 ? reinterpret_cast<const int32_t*>(dev + offsets[8]) : nullptr,
                    table_width};
}

bool CudaDecoderModel::start_step(const ForwardBatch& batch, std::span<const DeviceDraw> draws,
                                  const std::function<void()>& queued) {
  PAGODA_CHECK(!pending_.active, "start_step while a step is in flight");
  PAGODA_CHECK(!keys_.empty(), "forward before init_kv_cache");
  const ModelDefinition& c = def_;
  pending_ = PendingStep{};
  if (batch.num_tokens() == 0) {
    pending_.active = true;
    return true;
  }
  // The rows the caller asked for; a decode step padded to its graph bucket has more (below).
  const int64_t real_rows = static_cast<int64_t>(batch.logits_indices.size());
  const ForwardBatch& b = options_.cuda_graphs ? pad_to_graph_bucket(batch) : batch;
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

  // A decode step (q tokens per sequence, logits for each: graph_tokens_per_seq) replays a CUDA
  // graph: the ~11 kernels per layer then launch without host gaps. Its key fixes every size baked
  // into the kernels' parameters: sequences, tokens per sequence, the padded block-table width and
  // the attention grid.
  const int tokens_per_seq = options_.cuda_graphs ? graph_tokens_per_seq(b) : 0;
  bool graph = tokens_per_seq > 0;
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
    // A graph's padded rows read an EAGLE head's inputs past the step's: zeros until written
    // (finite), on the step's stream, before this step's inputs land there.
    if (c.eagle) {
      PAGODA_CUDA_CHECK(cudaMemsetAsync(act_.eagle_in.get(), 0, act_.eagle_in.size(), stream_));
    }
  }
  const size_t gathered_bytes = static_cast<size_t>(L * c.hidden_size) * es;
  const size_t logits_elems = static_cast<size_t>(L) * static_cast<size_t>(c.vocab_size);
  const bool tp_grow =
      tp_.world > 1 && tp_head_.size() < static_cast<size_t>(L * vocab_.stride) * es;
  if (gathered_.size() < gathered_bytes || logits_dtype_.size() < logits_elems * es ||
      host_logits_elems_ < logits_elems || tp_grow) {
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (gathered_.size() < gathered_bytes) gathered_ = DeviceBuffer(gathered_bytes * 2);
    if (logits_dtype_.size() < logits_elems * es) {
      logits_dtype_ = DeviceBuffer(logits_elems * es * 2);
      logits_f32_ = DeviceBuffer(logits_elems * sizeof(float) * 2);
    }
    if (tp_.world > 1) {  // the LM head's slices: [L, stride] here, [world, L, stride] gathered
      const size_t slice = static_cast<size_t>(L * vocab_.stride) * es;
      if (tp_head_.size() < slice) {
        tp_head_ = DeviceBuffer(slice * 2);
        tp_gathered_ = DeviceBuffer(slice * 2 * static_cast<size_t>(tp_.world));
      }
    }
    if (host_logits_elems_ < logits_elems) {
      if (host_logits_ != nullptr) cudaFreeHost(host_logits_);
      host_logits_elems_ = logits_elems * 2;
      PAGODA_CUDA_CHECK(cudaMallocHost(&host_logits_, host_logits_elems_ * sizeof(float)));
    }
    graphs_.clear();
  }
  hidden_layers_.assign(b.hidden_layers.begin(), b.hidden_layers.end());
  for (const int32_t l : hidden_layers_) {
    // The layer count: the final-normed output (an EAGLE-1 head's input; an EAGLE-1 head itself
    // has no final norm).
    PAGODA_CHECK(l >= -1 && l <= static_cast<int>(c.layers.size()) &&
                     (l < static_cast<int>(c.layers.size()) || w_.final_norm.get() != nullptr),
                 "hidden layer {} of {}", l, c.layers.size());
  }
  const size_t host_layers =
      batch.host_hidden_layers < 0
          ? hidden_layers_.size()
          : std::min(hidden_layers_.size(), static_cast<size_t>(batch.host_hidden_layers));
  if (w_.eagle.target_columns.get() != nullptr) {
    const size_t bytes = static_cast<size_t>(L * c.eagle->draft_vocab_size) * es;
    if (draft_logits_.size() < bytes) {
      PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
      draft_logits_ = DeviceBuffer(bytes * 2);
      graphs_.clear();
    }
  }
  const StepInputs in =
      stage_inputs(b, table_width, c.eagle ? batch.input_hidden_rows : std::span<const int32_t>{},
                   chain_.id_rows);
  if (in.id_rows != nullptr) {
    // A chained pass: its ids from the previous pass's drawn tokens, over the uploaded ones.
    PAGODA_CUDA_CHECK(cuda::gather_ids(chain_.previous, in.id_rows, batch.num_tokens(),
                                       const_cast<int32_t*>(in.ids), stream_));
  }
  if (c.eagle) stage_eagle_input(batch, in);
  // After the head's input gather, which may read hidden_dev_ itself (its previous output): a
  // grown buffer frees the old one. Device [layers, T, hidden], T padded; host the real tokens.
  hidden_stride_ = T * c.hidden_size;
  host_hidden_elems_ = host_layers * static_cast<size_t>(batch.num_tokens() * c.hidden_size);
  if (!hidden_layers_.empty()) {
    reserve_hidden(hidden_layers_.size() * static_cast<size_t>(hidden_stride_),
                   host_layers * static_cast<size_t>(hidden_stride_), host_hidden_elems_);
  }
  phases.mark();  // buffers and inputs

  // The attention plan (host), grown until it fits the workspace, then uploaded.
  cuda::AttentionPlan plan;
  const AttentionDef& attention = c.layers[0].attention;
  cuda::AttentionPlanInput plan_input{b.query_start_loc.data(),
                                      b.seq_lens.data(),
                                      S,
                                      attention.num_heads,
                                      attention.num_kv_heads,
                                      num_sms_,
                                      options_.attention_min_split_keys};
  // One plan serves every layer: it may cut splits to the window only if every layer has it.
  plan_input.sliding_window = c.common_window();
  plan_input.hopper_prefill = hopper_prefill_;
  for (;;) {
    const cudaError_t err = limits_.max_tokens >= T
                                ? cuda::plan_paged_attention(plan_input, limits_, &plan)
                                : cudaErrorInvalidValue;
    if (err == cudaSuccess) break;
    PAGODA_CHECK(err == cudaErrorInvalidValue, "plan_paged_attention: {}", cudaGetErrorString(err));
    PAGODA_CHECK(limits_.max_items < (1 << 26), "attention plan for {} tokens does not fit", T);
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    limits_.head_dim = attention.head_dim;
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
  phases.mark();  // attention plan

  if (!graph) {
    run_kernels(in, plan, T, S, L);
  } else {
    const DecodeGraphs::Shape shape{S, tokens_per_seq, hidden_layers_, c.eagle ? eagle_width_ : 0};
    if (options_.cublaslt_tuning && !graphs_.captured(shape)) {
      // A bucket's first capture (at start-up): the step runs once eagerly first, with cuBLASLt
      // timing its candidates for each new shape, so that the graph bakes in the fastest. The
      // step is a pure function of its inputs and the KV writes repeat the same values.
      blas_.tune_new_plans = true;
      run_kernels(in, plan, T, S, L);
      blas_.tune_new_plans = false;
    }
    graphs_.launch({shape, table_width, plan.decode_grid}, stream_,
                   [&] { run_kernels(in, plan, T, S, L); });
  }
  phases.mark();  // kernels or graph
  if (host_hidden_elems_ > 0) {
    // The host's layers only, each without the graph's padded rows: [host layers, real T, h]
    // from [host layers, T, h]. Example: T 4 padded from 3, hidden 2: layer 1's rows start at
    // element 8 on the device and at 6 on the host.
    PAGODA_CUDA_CHECK(cuda::convert(hidden_dev_.get(), dtype_, hidden_f32_.get(), DType::kF32,
                                    static_cast<int64_t>(host_layers) * hidden_stride_, stream_));
    const size_t host_row = host_hidden_elems_ / host_layers * sizeof(float);
    PAGODA_CUDA_CHECK(cudaMemcpy2DAsync(host_hidden_, host_row, hidden_f32_.get(),
                                        static_cast<size_t>(hidden_stride_) * sizeof(float),
                                        host_row, host_layers, cudaMemcpyDeviceToHost, stream_));
  }
  pending_.active = true;
  pending_.rows = real_rows;
  if (queued) queued();  // the device computes the logits meanwhile
  if (real_rows == 0) return true;
  // Rows drawn on the device send back one token id each; only if some row needs its logits are
  // all of them converted and copied (a [rows, 128k] fp32 copy is the largest transfer of a step).
  bool any_draw = false, any_logits = draws.size() != static_cast<size_t>(real_rows);
  for (const DeviceDraw& d : draws)
    (d.temperature >= 0 && options_.device_sampling ? any_draw : any_logits) = true;
  if (any_draw) {
    // The processed rows go to logits_f32_ (the host copy below converts the raw rows afresh).
    const auto rows = draws.first(std::min(draws.size(), static_cast<size_t>(real_rows)));
    DeviceSampler& sampler = chain_.sampler != nullptr ? *chain_.sampler : sampler_;
    if (sampler.launch(logits_dtype_.get(), dtype_, c.vocab_size, rows, logits_f32_.as<float>(),
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

void CudaDecoderModel::stage_eagle_input(const ForwardBatch& b, const StepInputs& in) {
  const EagleHeadDef& e = *def_.eagle;
  const int64_t T = b.num_tokens(), h = def_.hidden_size, width = b.input_hidden_width;
  // EAGLE-1 reads the target's final-normed hidden state or its own output (hidden wide each);
  // EAGLE-3 three target layers (fc.in) or its own output (hidden).
  PAGODA_CHECK(width == h || (e.version == 3 && width == e.fc.in),
               "EAGLE-{} head: input hidden width {} (hidden {}, fc {})", e.version, width, h,
               e.fc.in);
  eagle_width_ = width;
  if (b.input_hidden_device != nullptr) {
    // Where the source model left them: one gather of every layer's rows, no host copy.
    const DeviceHidden& src = *b.input_hidden_device;
    PAGODA_CHECK(src.device == device_ && src.dtype == dtype_ && src.layers * src.hidden == width &&
                     src.hidden > 0 && b.input_hidden.empty(),
                 "EAGLE head: input hidden states on device {} in {} ({} layers of {}) for a "
                 "head on device {} in {} reading width {}",
                 src.device, dtype_name(src.dtype), src.layers, src.hidden, device_,
                 dtype_name(dtype_), width);
    PAGODA_CHECK(b.input_hidden_rows.size() == static_cast<size_t>(T) && in.hidden_rows != nullptr,
                 "EAGLE head: {} input hidden rows for {} tokens", b.input_hidden_rows.size(), T);
    // Rows -1 read nothing (zeros): a source without data (none kept yet) has no other rows.
    const int64_t source_rows = src.data == nullptr ? 0 : src.layer_stride / src.hidden;
    for (const int32_t r : b.input_hidden_rows) {
      PAGODA_CHECK(r >= -1 && r < source_rows, "EAGLE head: input hidden row {} of {}", r,
                   source_rows);
    }
    const auto es = static_cast<int64_t>(dtype_size(dtype_));
    PAGODA_CUDA_CHECK(cuda::gather_layer_rows(src.data, src.layers, src.layer_stride * es,
                                              src.hidden * es, in.hidden_rows, T,
                                              act_.eagle_in.get(), stream_));
    return;
  }
  PAGODA_CHECK(
      b.input_hidden.size() == static_cast<size_t>(T * width) && b.input_hidden_rows.empty(),
      "EAGLE head: input_hidden of {} floats for {} tokens of width {}", b.input_hidden.size(), T,
      width);
  // From pageable host memory: the call returns once the source is staged (the caller may free
  // it), and the conversion follows on the stream.
  PAGODA_CUDA_CHECK(cudaMemcpyAsync(act_.eagle_in_f32.get(), b.input_hidden.data(),
                                    b.input_hidden.size() * sizeof(float), cudaMemcpyHostToDevice,
                                    stream_));
  PAGODA_CUDA_CHECK(cuda::convert(act_.eagle_in_f32.get(), DType::kF32, act_.eagle_in.get(), dtype_,
                                  T * width, stream_));
}

/// Decode-step graphs are captured per batch-size bucket (1, 2, 4, 8, then multiples of 8 up to
/// DecodeGraphs::kMaxTokens tokens, as vLLM's capture sizes) and tokens per sequence q: a batch of
/// S sequences runs as the bucket's size, the extra sequences being q tokens at positions 0..q-1
/// that write no KV (slot -1), read the null block 0 and whose rows nobody samples. Without
/// buckets every distinct S captured its own graph mid-serving (~ms each) as requests came and
/// went. Example: S = 3, q = 2 pads to 4 sequences: ids [a0 a1 b0 b1 c0 c1 0 0], positions of the
/// padded sequence [0 1], query_start [0 2 4 6 8], seq_lens [.. .. .. 2].
const ForwardBatch& CudaDecoderModel::pad_to_graph_bucket(const ForwardBatch& b) {
  const int q = graph_tokens_per_seq(b);
  if (q == 0) return b;
  const int S = b.num_seqs();
  const int64_t bucket = DecodeGraphs::bucket(S);
  if (bucket == S || bucket * q > DecodeGraphs::kMaxTokens || q > block_size_) return b;
  const auto n = static_cast<size_t>(bucket);
  const auto rows = n * static_cast<size_t>(q);
  const size_t width = static_cast<size_t>(std::max(b.max_blocks_per_seq, 1));
  padded_.ids.assign(b.token_ids.begin(), b.token_ids.end());
  padded_.ids.resize(rows, 0);
  padded_.positions.assign(b.positions.begin(), b.positions.end());
  for (size_t r = padded_.positions.size(); r < rows; ++r)
    padded_.positions.push_back(static_cast<int32_t>(r % static_cast<size_t>(q)));
  padded_.query_start.resize(n + 1);
  for (size_t i = 0; i <= n; ++i) padded_.query_start[i] = static_cast<int32_t>(i) * q;
  padded_.seq_lens.assign(b.seq_lens.begin(), b.seq_lens.end());
  padded_.seq_lens.resize(n, q);
  padded_.tables.assign(b.block_tables.begin(), b.block_tables.end());
  padded_.tables.resize(n * width, 0);  // block 0: the null block
  padded_.slots.assign(b.slot_mapping.begin(), b.slot_mapping.end());
  padded_.slots.resize(rows, -1);
  padded_.rows.resize(rows);
  for (size_t i = 0; i < rows; ++i) padded_.rows[i] = static_cast<int32_t>(i);
  padded_.batch =
      ForwardBatch{padded_.ids,    padded_.positions,       padded_.query_start, padded_.seq_lens,
                   padded_.tables, static_cast<int>(width), padded_.slots,       padded_.rows};
  // The hidden layers are kept for the padded rows too; the inputs of an EAGLE head and the
  // host's layers are read from the caller's batch (start_step).
  padded_.batch.hidden_layers = b.hidden_layers;
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

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

}  // namespace pagoda
