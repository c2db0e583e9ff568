#pragma once
// The model interface the runtime drives, and the entry point that builds one from a directory.
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_cache_spec.h"
#include "model/config.h"
#include "model/definition.h"
#include "model/forward_batch.h"
#include "model/registry.h"
#include "model/tensor_parallel.h"
#include "pagoda/runtime_options.h"

namespace pagoda {

/// One distinct token of a row's history, for the penalties of a DeviceDraw: repetition applies
/// when in_prompt or output_count > 0, presence and frequency when output_count > 0.
struct DrawPenaltyToken {
  int32_t token = 0;
  int32_t output_count = 0;
  int32_t in_prompt = 0;
};

/// How one logits row may be drawn on the model's device instead of being returned
/// (forward_sample): the CPU sampler's processors, truncations and log-probabilities, with the
/// same semantics (src/sampling/sampler.cc). The spans must stay valid during forward_sample.
struct DeviceDraw {
  float temperature = -1.0f;  // < 0: return the logits; 0: greedy; > 0: temperature sampling
  uint64_t seed = 0;          // the request's seed
  uint64_t counter = 0;       // the request's token index: draws depend on (seed, counter) only
  int top_k = 0;              // <= 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::span<const DrawPenaltyToken> penalty_tokens;       // distinct tokens
  std::span<const std::pair<int32_t, float>> logit_bias;  // distinct tokens
  std::span<const int32_t> masked;                        // logits set to -inf (min_tokens)
  // Structured outputs: [ceil(vocab / 32)] words, bit (id % 32) of word (id / 32) set for the
  // tokens that may be drawn (the others' logits become -inf); empty: no such mask.
  std::span<const uint32_t> allowed;
  int num_logprobs = -1;  // -1: none; 0: the chosen token's; N <= 20: and the top N (raw model)
};

/// The raw log-probabilities of a row drawn on the device (DeviceDraw::num_logprobs >= 0).
struct DrawnLogprobs {
  float logprob = 0.0f;                        // of the drawn token
  std::vector<std::pair<int32_t, float>> top;  // descending, ties to the lower id
};

/// One pass of Model::forward_chain: a forward whose every row is drawn, and whose inputs may be
/// the previous pass's drawn tokens and output hidden states.
struct ChainedPass {
  ForwardBatch batch;
  std::span<const DeviceDraw> draws;  // [rows]: each row's draw, temperature >= 0 (drawn)
  // [num_tokens] or empty: token t's id is the previous pass's drawn token of its row id_rows[t]
  // when >= 0, else batch.token_ids[t] (there a placeholder in the vocabulary). Example: the
  // previous pass drew [812, 90] and this pass has ids [0, 0, 5] with id_rows [1, 0, -1]: it
  // computes [90, 812, 5].
  std::span<const int32_t> id_rows;
  // batch.input_hidden_rows index the previous pass's hidden_layers as this model kept them
  // (device_hidden_states() after it); forward_chain sets batch.input_hidden_device.
  bool hidden_from_previous = false;
};

/// A loaded causal language model that runs forward passes over flat token batches.
class Model {
 public:
  virtual ~Model() = default;
  [[nodiscard]] virtual const ModelConfig& config() const = 0;
  /// The family's definition this model was built from.
  [[nodiscard]] virtual const ModelDefinition& definition() const = 0;
  /// What the KV cache holds per token on this model's device (the pool is sized from it).
  [[nodiscard]] virtual const kv::KVCacheSpec& kv_cache_spec() const = 0;
  /// Allocates the paged KV cache (replacing any previous one): num_blocks blocks of block_size
  /// tokens, in the layout this model's attention kernels read.
  virtual void init_kv_cache(int64_t num_blocks, int block_size) = 0;
  /// Free and total bytes of the device the model lives on; nullopt for host memory (the KV pool
  /// is then sized by --kv-cache-memory alone).
  [[nodiscard]] virtual std::optional<std::pair<size_t, size_t>> device_memory() const {
    return std::nullopt;
  }
  /// The decode batch sizes this model runs as captured graphs, up to max_num_seqs sequences
  /// (none: it has no graphs). capture_decode_graphs() runs them before the first request.
  [[nodiscard]] virtual std::vector<int> decode_graph_sizes(int max_num_seqs) const {
    (void)max_num_seqs;
    return {};
  }
  /// Start-up is over (the decode graphs are captured): the model may persist what its warm-up
  /// learned (the GPU model saves its timed cuBLASLt choices).
  virtual void end_warm_up() {}
  /// Copies whole KV blocks in every layer (copy-on-write of forked sequences), in order.
  virtual void copy_kv_blocks(std::span<const std::pair<int32_t, int32_t>> src_dst) = 0;
  /// A block's K and V in every layer as kv_cache_spec().block_bytes(block_size) bytes
  /// ([layer][K, V][one layer's block in the spec's layout]), and back: what a host tier or a KV
  /// transfer moves. Waits for any step in flight.
  virtual void export_kv_block(int32_t block, std::span<std::byte> out) = 0;
  virtual void import_kv_block(int32_t block, std::span<const std::byte> in) = 0;
  /// Batches of the two above, what the host KV tier moves before a step: blocks[i]'s bytes are
  /// out[i * B, (i + 1) * B) (in[...]), B = kv_cache_spec().block_bytes(block_size). Example: B =
  /// 4096 and blocks [7, 2] put block 2's bytes at [4096, 8192). One call per step, so that a
  /// device can queue the whole batch at once; the default copies block by block, synchronously
  /// (the CPU model's copies are memcpys, the GPU model's cudaMemcpy of each layer's K and V).
  virtual void save_kv_blocks(std::span<const int32_t> blocks, std::span<std::byte> out) {
    if (blocks.empty()) return;
    const size_t bytes = out.size() / blocks.size();
    PAGODA_CHECK(bytes * blocks.size() == out.size(), "save_kv_blocks: {} bytes for {} blocks",
                 out.size(), blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i)
      export_kv_block(blocks[i], out.subspan(i * bytes, bytes));
  }
  virtual void load_kv_blocks(std::span<const int32_t> blocks, std::span<const std::byte> in) {
    if (blocks.empty()) return;
    const size_t bytes = in.size() / blocks.size();
    PAGODA_CHECK(bytes * blocks.size() == in.size(), "load_kv_blocks: {} bytes for {} blocks",
                 in.size(), blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i)
      import_kv_block(blocks[i], in.subspan(i * bytes, bytes));
  }
  /// Runs the batch, writing each token's K/V into the cache at its slot, and returns the logits
  /// [batch.logits_indices.size(), vocab_size] (fp32, row-major, host memory owned by the model:
  /// writable, valid until the next forward). Not thread-safe: one engine thread drives a model.
  [[nodiscard]] virtual std::span<float> forward(const ForwardBatch& batch) = 0;
  /// forward() that may sample on the device: each row whose draw has temperature >= 0 may be drawn
  /// where the logits are, its token written to tokens[row] (and, with num_logprobs >= 0, its
  /// log-probabilities to logprobs[row]); rows left at -1 have their logits in the returned span
  /// (a model that samples rows may leave the logits of those rows unwritten). The default
  /// samples nothing and returns forward().
  [[nodiscard]] virtual std::span<float> forward_sample(const ForwardBatch& batch,
                                                        std::span<const DeviceDraw> draws,
                                                        std::span<int32_t> tokens,
                                                        std::span<DrawnLogprobs> logprobs) {
    (void)draws;
    (void)logprobs;
    std::fill(tokens.begin(), tokens.end(), -1);
    return forward(batch);
  }
  /// The hidden states of the last forward's batch.hidden_layers: [layers, num_tokens, hidden]
  /// fp32, valid until the next forward (empty when none were asked for).
  [[nodiscard]] virtual std::span<float> hidden_states() { return {}; }
  /// The last forward's batch.hidden_layers where they were computed (every layer, also those
  /// past host_hidden_layers), valid until the next forward; its device and dtype are set before
  /// any forward (data then null). nullopt: this model keeps hidden states on the host only and
  /// reads no ForwardBatch::input_hidden_device (the CPU model).
  [[nodiscard]] virtual std::optional<DeviceHidden> device_hidden_states() const {
    return std::nullopt;
  }
  /// Whether forward_chain keeps each pass's drawn tokens where they were drawn and feeds them to
  /// the next pass there, the host reading them once after the last pass (the GPU model with
  /// device sampling); else a chain is forward_sample per pass through the host.
  [[nodiscard]] virtual bool chains_on_device() const { return false; }
  /// Runs `passes` in order, pass p + 1 reading pass p's drawn tokens (ChainedPass::id_rows) and
  /// hidden states (hidden_from_previous); every row must be drawn (forward_sample's tokens; a
  /// row left undrawn fails the call). tokens: [total rows], pass 0's rows first, then pass 1's,
  /// ... The default runs forward_sample pass by pass and puts the ids in on the host.
  virtual void forward_chain(std::span<const ChainedPass> passes, std::span<int32_t> tokens);
  /// Starts forward_sample(batch, draws) and returns while the device still computes, so that the
  /// caller's host work (emitting the previous step's tokens) overlaps it; finish_step() then
  /// waits and returns what forward_sample would. The batch's spans must stay valid until then;
  /// one step at a time. Returns false when this model computes synchronously: the caller then
  /// calls forward_sample itself (the default). `queued`, when set, is called once the forward
  /// pass is queued and before the draws are read: the caller may still change the draws' contents
  /// (not their number) there, e.g. structured-output masks computed while the device runs.
  virtual bool start_step(const ForwardBatch& batch, std::span<const DeviceDraw> draws,
                          const std::function<void()>& queued = {}) {
    (void)batch;
    (void)draws;
    (void)queued;
    return false;
  }
  /// Waits for the step start_step() launched; tokens, logprobs and the returned span as
  /// forward_sample.
  [[nodiscard]] virtual std::span<float> finish_step(std::span<int32_t> tokens,
                                                     std::span<DrawnLogprobs> logprobs) {
    (void)tokens;
    (void)logprobs;
    return {};
  }
};

/// How weights are obtained.
enum class LoadFormat : uint8_t {
  kSafetensors,  // the checkpoint's files
  kDummy,        // random values of the right shapes (benchmarks), fixed seed
};

/// The KV cache the engine asks of a model.
struct KVCacheOptions {
  /// --kv-cache-dtype, vLLM's names (kv::parse_kv_cache_dtype): "auto" is the checkpoint's
  /// (ModelDefinition::auto_kv_cache_dtype), else the backend's (fp32 on the CPU, the activation
  /// dtype on the GPU).
  std::string dtype = "auto";
  /// --calculate-kv-scales: each layer's k/v scales from its first forward's K/V, max|k| / 200
  /// and max|v| / 100 for fp8 (vLLM's K_SCALE_CONSTANT and V_SCALE_CONSTANT), max / 127 for
  /// int8, instead of the checkpoint's (or 1.0). Needs an fp8 or int8 cache.
  bool calculate_scales = false;
};

/// Options of load_model.
struct LoadOptions {
  LoadFormat format = LoadFormat::kSafetensors;
  DefinitionOptions definition;  // the engine's settings the family's definition depends on
  std::optional<DType> dtype;    // dummy weights' dtype; default: the config's
  uint64_t seed = 0;             // dummy weights' seed
  RuntimeOptions runtime;        // a GPU model's knobs (cuda_graphs off: --enforce-eager)
  /// CPU only: multiply bf16 weights by activations rounded to bf16 at prefill sizes (about twice
  /// as fast without AMX) instead of exact fp32 products (docs/engine.md, "CPU matmuls").
  bool cpu_bf16_round = false;
  /// CPU only: oneDNN for the matmuls past the decode sizes, faster at prefill sizes, instead of
  /// the batch-invariant kernel, with which a row's results never depend on the rest of the batch
  /// (docs/engine.md, "Numerics"). cpu_bf16_round implies it.
  bool cpu_onednn = false;
  KVCacheOptions kv_cache;
  /// -tp N: this process's rank of the group and its communicator; the model holds only the
  /// rank's slices (model/tensor_parallel.h), on the CPU or the GPU.
  TensorParallel tensor_parallel;
  /// Called with the fraction of the weights loaded so far (0..1) while loading takes time: GPU
  /// uploads and dummy fills (an mmapped CPU checkpoint needs no loading). May be empty.
  std::function<void(double)> progress;
};

/// Reads the config, builds the family's definition, loads and checks the weights for the CPU.
/// Throws NotFound / InvalidArgument naming the file and the field or tensor.
[[nodiscard]] std::unique_ptr<Model> load_model(const std::string& model_dir,
                                                const LoadOptions& options, ThreadPool& pool);

}  // namespace pagoda
