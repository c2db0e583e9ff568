#pragma once
// The CUDA backend's model (internal to runtime/cuda): a ModelDefinition on one GPU. Its methods
// live in cuda_decoder_model.cc (buffers, step staging, graphs, sampling) and cuda_forward.cc
// (the kernel sequence of a step: the definition's blocks, fused for small steps).
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/linear_int8.h"
#include "kernels/cuda/linear_w4.h"
#include "kernels/cuda/paged_attention.h"
#include "model/model.h"
#include "model/tensor_parallel.h"
#include "pagoda/runtime_options.h"
#include "runtime/cuda/cuda_weights.h"
#include "runtime/cuda/decode_graphs.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_sampler.h"
#include "runtime/device_model.h"

namespace pagoda {

/// Device activations of one step, grown to the largest step seen; each [capacity, width] in the
/// activation dtype, width the widest over the layers.
struct CudaActivations {
  int64_t capacity = 0;
  DeviceBuffer residual, hidden, normed;  // [capacity, hidden]
  DeviceBuffer qkv;                       // [capacity, q + 2 kv]
  DeviceBuffer attn;                      // [capacity, q]
  DeviceBuffer gate_up;                   // [capacity, 2 intermediate]
  DeviceBuffer act;                       // [capacity, intermediate]
  // FP8 models only: a projection's input quantized per token for the W8A8 GEMM.
  DeviceBuffer fp8_x;      // [capacity, widest input] e4m3
  DeviceBuffer fp8_scale;  // [capacity] fp32
  // INT8 models only (cuda::Int8LinearParams): a projection's input quantized per token, and the
  // GEMM's int32 product before its scales.
  DeviceBuffer int8_x;      // [capacity, widest input] int8
  DeviceBuffer int8_scale;  // [capacity] fp32
  DeviceBuffer int8_acc;    // [min(capacity, kInt8GemmRows), widest output] int32, or empty
  // GPTQ / AWQ models only (cuda::W4LinearParams), allocated once: an act-order projection's input
  // gathered by its permutation for the GEMV, and the large-m path's dequantized weight.
  DeviceBuffer w4_x;      // [kW4GemvMaxM, widest act-order input] or empty
  DeviceBuffer w4_dense;  // [largest W4 out * in] or empty
  // EAGLE heads only: the step's input hidden states as the host sent them (fp32; unused when
  // they are gathered on the device) and in the activation dtype, [capacity, fc.in] each (wide
  // enough for every input width: hidden <= fc.in; rows [T, width] packed at the step's width),
  // and the concatenated inputs of fc (EAGLE-1) and of the attention (EAGLE-3).
  DeviceBuffer eagle_in_f32, eagle_in;  // [capacity, fc.in]
  DeviceBuffer eagle_cat;               // [capacity, max(2 hidden, fc.in)]

  void reserve(int64_t tokens, const ModelDefinition& d, size_t element_size);
};

/// Device pointers of one step's inputs (see CudaDecoderModel::stage_inputs).
struct StepInputs {
  const int64_t* slots;
  const int32_t* ids;
  const int32_t* positions;
  const int32_t* query_start;
  const int32_t* seq_lens;
  const int32_t* block_tables;  // [num_seqs, table_width]
  const int32_t* logits_rows;
  // An EAGLE head's ForwardBatch::input_hidden_rows [real tokens] (null without them).
  const int32_t* hidden_rows;
  // A chained pass's ChainedPass::id_rows [real tokens] (null without them).
  const int32_t* id_rows;
  int table_width;
};

/// The element types a CudaDecoderModel computes and caches in.
struct CudaDTypes {
  DType activations = DType::kBF16;  // bf16 or f16
  // The KV cache: the activation dtype, or the codes of kF8E4M3, kF8E5M2 or kI8 (x / the layer's
  // scale: kernels/cuda/kv_quant.cuh).
  DType kv_cache = DType::kBF16;
  std::vector<cpu::KVScales> kv_scales;  // [layers] of a code cache (empty: 1.0)
};

/// Where a CudaDecoderModel runs: its GPU and, with -tp N, its rank of the group (the definition
/// and weights already the rank's slices, model/tensor_parallel.h).
struct CudaRank {
  GpuPlacement placement;  // the device, the communicator kind, the ranks sharing the device
  TensorParallel tp;       // rank, world and the host communicator (world 1: none)
};

/// The model on the GPU.
class CudaDecoderModel final : public Model {
 public:
  CudaDecoderModel(const ModelConfig& config, ModelDefinition definition, const CudaDTypes& dtypes,
                   const CudaRank& rank, CudaWeightSource weights, const RuntimeOptions& options,
                   ThreadPool& pool);
  ~CudaDecoderModel() override;

  const ModelConfig& config() const override { return config_; }
  const ModelDefinition& definition() const override { return def_; }
  const kv::KVCacheSpec& kv_cache_spec() const override { return kv_spec_; }
  void init_kv_cache(int64_t num_blocks, int block_size) override;
  void copy_kv_blocks(std::span<const std::pair<int32_t, int32_t>> src_dst) override;
  void export_kv_block(int32_t block, std::span<std::byte> out) override;
  void import_kv_block(int32_t block, std::span<const std::byte> in) override;

  std::span<float> forward(const ForwardBatch& batch) override {
    return forward_sample(batch, {}, {}, {});
  }
  std::span<float> forward_sample(const ForwardBatch& batch, std::span<const DeviceDraw> draws,
                                  std::span<int32_t> tokens,
                                  std::span<DrawnLogprobs> logprobs) override {
    PAGODA_CHECK(start_step(batch, draws), "start_step failed");
    return finish_step(tokens, logprobs);
  }
  bool start_step(const ForwardBatch& batch, std::span<const DeviceDraw> draws,
                  const std::function<void()>& queued = {}) override;
  std::span<float> finish_step(std::span<int32_t> tokens,
                               std::span<DrawnLogprobs> logprobs) override;

  bool chains_on_device() const override {
    return options_.device_sampling && options_.chained_drafts;
  }
  /// The passes queued back to back on the stream (cuda_chain.cc): each pass's ids gathered on
  /// the device from the previous pass's drawn tokens, one synchronisation after the last.
  void forward_chain(std::span<const ChainedPass> passes, std::span<int32_t> tokens) override;
  std::vector<int> decode_graph_sizes(int max_num_seqs) const override {
    return options_.cuda_graphs ? DecodeGraphs::buckets(max_num_seqs) : std::vector<int>{};
  }
  std::optional<std::pair<size_t, size_t>> device_memory() const override;
  void end_warm_up() override;
  std::span<float> hidden_states() override {
    return {static_cast<float*>(host_hidden_), host_hidden_elems_};
  }
  std::optional<DeviceHidden> device_hidden_states() const override;

 private:
  StepInputs stage_inputs(const ForwardBatch& batch, int table_width,
                          std::span<const int32_t> hidden_rows, std::span<const int32_t> id_rows);
  const ForwardBatch& pad_to_graph_bucket(const ForwardBatch& b);
  /// The kernel sequence of one step (cuda_forward.cc): enqueues only, so it can be captured.
  void run_kernels(const StepInputs& in, const cuda::AttentionPlan& plan, int64_t T, int S,
                   int64_t L);
  /// eagle_x: an EAGLE head's attention input of layer 0 (eagle_input), projected as it is.
  void attention_input(int l, const StepInputs& in, int64_t T, bool fused, bool fused_rope,
                       const void* eagle_x = nullptr);
  /// An EAGLE head's first steps (model/definition.h, EagleHeadDef), with embed(token) in
  /// act_.normed and the step's input hidden states in act_.eagle_in [T, eagle_width_]: sets the
  /// residual stream to x and returns layer 0's attention input.
  const void* eagle_input(int64_t T);
  /// Enqueues an EAGLE head's input hidden states into act_.eagle_in: the upload of
  /// ForwardBatch::input_hidden, or the gather of input_hidden_rows from input_hidden_device
  /// (in.hidden_rows). `b` is the caller's batch (unpadded).
  void stage_eagle_input(const ForwardBatch& b, const StepInputs& in);
  /// The final norm of every token into hidden_dev_'s slice of each hidden_layers_ entry equal to
  /// the layer count (an EAGLE-1 head's input: what the LM head reads).
  void keep_final_normed(int64_t T, bool fused);
  /// Copies the residual stream (+ act_.hidden when a sublayer output is pending) into
  /// hidden_dev_'s slice of each hidden_layers_ entry equal to `layer`.
  void keep_hidden(int layer, int64_t T, bool pending);
  /// Grows the hidden-state buffers: `device` elements on the device (every layer), `convert`
  /// of them converted to fp32 and `host` elements on the host.
  void reserve_hidden(size_t device, size_t convert, size_t host);
  /// -tp N: the group's communicator on stream_ (staged or NCCL; CudaRank::placement.comm).
  void make_communicator(const CudaRank& rank);
  /// -tp N: x[count] (device, activation dtype) summed over the ranks, in place; nothing at tp 1.
  void all_reduce(void* x, int64_t count);
  /// The embedding of the step's tokens into `out` [T, hidden]: the rank's vocabulary rows, then
  /// the all-reduce, with -tp N.
  void embed(const StepInputs& in, int64_t T, void* out);
  /// The LM head's rows [L, vocab_shard rows] gathered from every rank into logits_dtype_ [L,
  /// vocab] (-tp N).
  void lm_head_tensor_parallel(const void* x, int64_t L);
  void linear(const void* x, int64_t m, const CudaLinear& w, void* y);
  void gemv_fused(const void* x, int64_t m, const CudaLinear& w, void* y,
                  const cuda::GemvFusion& f);
  cuda::GemvFusion fusion(const DeviceBuffer& norm_weight, cuda::GemvEpilogue epilogue) const;
  // Steps of up to this many tokens run the fused projections (when fuse_small_steps_).
  // FP8, INT8 and W4 projections: their GEMVs' limits (cuda::kFp8GemvMaxM, kInt8GemvMaxM,
  // kW4GemvMaxM).
  int64_t fused_max_m() const {
    int64_t m = std::max(cuda::kGemvMaxM, blas_.gemv_mma_max_m);
    if (fp8_) m = std::min(m, cuda::kFp8GemvMaxM);
    if (int8_) m = std::min(m, cuda::kInt8GemvMaxM);
    if (w4_) m = std::min(m, cuda::kW4GemvMaxM);
    return m;
  }

  ModelConfig config_;
  ModelDefinition def_;
  kv::KVCacheSpec kv_spec_;
  DType dtype_;
  int device_;
  RuntimeOptions options_;
  // -tp N: this rank, its vocabulary rows, the ranks sharing its GPU and the device communicator
  // (null at tp 1). comm_ reads and writes device buffers on stream_.
  TensorParallel tp_;
  VocabShard vocab_;
  int ranks_on_device_ = 1;
  std::unique_ptr<Communicator> comm_;
  // -tp N: the rank's LM head output [L, vocab_.rows] (packed) in a buffer of L * vocab_.stride
  // elements (the all-gather sends the same bytes from every rank), and every rank's, gathered
  // [world, L * vocab_.stride]: rank r's [L, rows_r] block starts at element r * L * stride.
  DeviceBuffer tp_head_, tp_gathered_;
  int num_sms_ = 132;
  cudaStream_t stream_ = nullptr;
  cuda::BlasContext blas_;
  std::string device_signature_;  // GPU model, SMs and cuBLASLt version: the tuning cache's key
  CudaWeights w_;
  DeviceBuffer inv_freq_;  // [head_dim / 2] fp32
  float embed_scale_ = 1.0f;
  cuda::KVCacheLayout layout_;
  int block_size_ = 0;
  bool hopper_prefill_ = false;  // AttentionPlanInput::hopper_prefill of this cache's plans
  std::vector<DeviceBuffer> keys_, values_;  // per layer, KVCacheLayout
  // A code cache's scales: [layers, 2] fp32, (k, v) of layer l at 2 l (empty: no code cache).
  DeviceBuffer kv_scales_;
  CudaActivations act_;
  // Step inputs: one pinned host area and one device area, copied in one transfer. The copy's
  // event: the host area is rewritten only once the last copy from it ran (chained passes queue
  // several steps without synchronising).
  void* host_inputs_ = nullptr;
  size_t host_inputs_bytes_ = 0;
  cudaEvent_t inputs_copied_ = nullptr;
  DeviceBuffer device_inputs_;
  DeviceBuffer logits_dtype_, logits_f32_, gathered_;
  void* host_logits_ = nullptr;  // pinned [rows, vocab] fp32, returned by forward()
  DeviceSampler sampler_;        // rows drawn on the device
  // forward_chain: a sampler per pass (each keeps its pass's drawn tokens on the device and its
  // own pinned staging), and what the pass being started reads from the one before it.
  std::vector<std::unique_ptr<DeviceSampler>> chain_samplers_;
  struct ChainLink {
    DeviceSampler* sampler = nullptr;       // this pass's (null: sampler_, outside a chain)
    const int32_t* previous = nullptr;      // device: the previous pass's drawn tokens [rows]
    std::span<const int32_t> id_rows = {};  // [real tokens]: ChainedPass::id_rows
  } chain_;
  // An EAGLE-3 head with a draft vocabulary: its LM head's rows [L, draft_vocab] in the activation
  // dtype, before gather_columns places them at their target ids in logits_dtype_.
  DeviceBuffer draft_logits_;
  int64_t eagle_width_ = 0;  // an EAGLE head's step: ForwardBatch::input_hidden_width
  // Hidden states of the step's ForwardBatch::hidden_layers: hidden_dev_ [layers, T, hidden] in
  // the activation dtype (T the step's tokens, padded to its graph bucket: a fixed buffer the
  // graphs write), the first host_hidden_layers of them in fp32 on the device [host layers, T,
  // hidden] and in pinned host memory [host layers, real tokens, hidden] (the padding dropped).
  std::vector<int32_t> hidden_layers_;
  DeviceBuffer hidden_dev_, hidden_f32_;
  int64_t hidden_stride_ = 0;  // elements per layer in hidden_dev_: T x hidden
  void* host_hidden_ = nullptr;
  size_t host_hidden_capacity_ = 0;  // elements
  size_t host_hidden_elems_ = 0;     // of the last step
  size_t host_logits_elems_ = 0;
  cuda::AttentionLimits limits_;
  DeviceBuffer attention_workspace_;
  // Whether steps of at most fused_max_m() tokens run the fused GEMVs (run_kernels): the plain
  // Llama block (model/definition.h) with every projection's k a multiple of 8 (the GEMVs'
  // 16-byte loads), unless options_.gemv_fusion is off (A/B).
  bool fuse_small_steps_ = false;
  bool fp8_ = false;     // some projection has FP8 weights (CudaLinear::fp8)
  bool int8_ = false;    // some projection has INT8 weights (CudaLinear::int8)
  bool w4_ = false;      // some projection has GPTQ / AWQ weights (CudaLinear::w4)
  DecodeGraphs graphs_;  // of decode-only steps (options_.cuda_graphs)
  // A decode batch padded to its graph bucket (pad_to_graph_bucket).
  struct PaddedBatch {
    std::vector<int32_t> ids, positions, query_start, seq_lens, tables, rows;
    std::vector<int64_t> slots;
    ForwardBatch batch;
  } padded_;
  // The step start_step() launched and finish_step() collects.
  struct PendingStep {
    bool active = false;
    int64_t rows = 0;               // logits rows
    size_t logits_elems = 0;        // > 0: the fp32 logits are being copied to host_logits_
    bool sampled = false;           // sampler_ drew some rows
    std::vector<DeviceDraw> draws;  // the rows' draws (for sampler_.collect)
  } pending_;
};

}  // namespace pagoda
