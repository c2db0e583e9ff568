#pragma once
// EngineArgs: everything that configures an engine, with vLLM's flag names in the comments.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pagoda/runtime_options.h"

namespace pagoda {

/// The per-request stages of the engine loop, as the fault-injection hook names them.
enum class RequestStage {
  kAdmit,       // queued into the scheduler
  kSchedule,    // the step's bookkeeping for one scheduled request (its inputs, its draw)
  kSample,      // drawing its next token (may run on the engine's pool threads)
  kDetokenize,  // turning its new token into text
  kStopCheck,   // EOS, stop tokens, stop strings, lengths
  kEmit,        // pushing the update to its stream
};

/// --speculative-config (vLLM's keys): how the engine proposes drafts that a step verifies.
/// Greedy requests keep exactly the tokens plain decoding gives, sampled ones exactly its
/// distribution (docs/engine.md, "Speculative decoding").
struct SpeculativeConfig {
  /// ngram (prompt lookup over the request's own tokens); draft_model (a smaller model of the same
  /// vocabulary, `model`, drafting autoregressively in the executor); parallel_draft (a small
  /// Llama with a mask token proposing all k drafts in one forward); eagle / eagle3 (EAGLE-1 /
  /// EAGLE-3 heads over the target's hidden states, CPU only). vLLM's other methods (medusa,
  /// mlp_speculator, mtp, suffix, ...) are refused by name.
  std::string method = "ngram";
  std::string model;               // the draft's Hugging Face directory (--load-format applies)
  std::string revision;            // the Hub revision of a `model` given as a repo id
  int num_speculative_tokens = 0;  // K: drafts per step at most, 1..15 (1 + K rows: a graph)
  int prompt_lookup_min = 5;       // ngram: shortest suffix looked up
  int prompt_lookup_max = 5;       // ngram: longest suffix looked up (tried first)
  /// vLLM's: the draft's weight format (e.g. "fp8": quantized at load, as --quantization does
  /// for the target); empty: what the draft checkpoint's config.json says.
  std::string quantization;
  /// vLLM's: the draft's passes run eagerly (no decode graphs for the draft).
  bool enforce_eager = false;
  /// pagoda's: choose each request's k in 0..K from its acceptance rate (an EWMA), weighing
  /// draft_row_cost, the cost of one more row in a step relative to the step (on a GPU, the
  /// measured costs of decode steps: engine/speculation_costs.h); off: always K.
  bool adaptive = true;
  double draft_row_cost = 0.1;
  /// Benchmarks only: each draft is kept with this probability, whatever the verifier (which still
  /// runs in full) decided; the outputs then no longer follow the target's distribution.
  std::optional<double> bench_acceptance_rate;
};

/// --kv-transfer-config (vLLM's keys): this engine's part in prefill/decode disaggregation
/// (docs/engine.md, "Prefill/decode disaggregation").
struct KVTransferConfig {
  std::string kv_connector = "PagodaConnector";  // the only connector
  /// kv_producer (prefills `do_remote_decode` requests and serves their KV), kv_consumer
  /// (admits `do_remote_prefill` requests, pulling their KV), or kv_both.
  std::string kv_role;
  std::string engine_id;  // reported as remote_engine_id; empty: "pagoda-HOST:PORT"
  // kv_connector_extra_config (pagoda's keys):
  std::string transport = "tcp";   // transport: tcp (Boost.Asio) or ucx (UCX's UCP, RMA reads)
  std::string host = "127.0.0.1";  // host: the producer's transfer address (bound and reported)
  int port = 0;                    // port: the producer's transfer port; 0: an ephemeral one
  int pull_timeout_ms = 30000;     // pull_timeout (seconds): a consumer's bound on one pull
  int keep_timeout_ms = 120000;    // keep_timeout (seconds): a producer keeps unpulled KV this long
  /// ucx_tls (transport ucx only): UCX's transport list, such as "tcp" or "rc,sm,self"; empty:
  /// UCX's own choice (its UCX_TLS variable, else what the machine has).
  std::string ucx_tls;

  [[nodiscard]] bool producer() const { return kv_role == "kv_producer" || kv_role == "kv_both"; }
  [[nodiscard]] bool consumer() const { return kv_role == "kv_consumer" || kv_role == "kv_both"; }
};

/// How an engine is built: the model, its weights and the limits of the KV cache and scheduler.
struct EngineArgs {
  std::string model;                 // Hugging Face model directory
  std::string tokenizer;             // tokenizer.json or directory; default: the model's
  std::string load_format = "auto";  // --load-format: auto (safetensors) or dummy
  std::string dtype = "auto";  // --dtype: weights (the CPU converts at load), activations (GPU)
  /// --quantization: vLLM's method names (fp8, gptq, awq, compressed-tensors, ...); empty: as the
  /// checkpoint's quantization_config says. fp8 on an unquantized checkpoint quantizes at load.
  std::string quantization;
  std::string device = "auto";          // --device: auto (the GPU if present), cpu or cuda
  double gpu_memory_utilization = 0.9;  // --gpu-memory-utilization: GPU memory pagoda may use
  uint64_t seed = 0;                    // --seed: dummy weights, and requests without a seed
  int num_threads = 0;                  // CPU threads; 0 = all cores
  int block_size = 16;                  // --block-size, tokens per KV block
  /// --kv-cache-memory; 0 = automatic: 4 GiB on the CPU, on a GPU what --gpu-memory-utilization
  /// leaves after the weights and a reserve for activations.
  int64_t kv_cache_memory_bytes = 0;
  /// --kv-cache-dtype, vLLM's names: auto (the checkpoint's, else fp32 on the CPU and the
  /// activation dtype on a GPU), fp8 (= fp8_e4m3), fp8_e4m3, fp8_e5m2, int8, bfloat16, float16.
  /// fp8 and int8 codes carry per-layer k/v scales (the checkpoint's, else 1.0); the CPU runs
  /// every one, the GPU fp8, fp8_e5m2, int8 and its activation dtype. docs/engine.md, "Quantized
  /// KV cache".
  std::string kv_cache_dtype = "auto";
  /// --calculate-kv-scales: the k/v scales of an fp8/int8 cache from the first forward's K/V
  /// (vLLM's rule) instead of the checkpoint's.
  bool calculate_kv_scales = false;
  bool enable_prefix_caching = true;  // --[no-]enable-prefix-caching
  /// --kv-offloading-size (GiB at the command line): a host-memory tier of this many bytes behind
  /// the KV pool; blocks evicted from the pool are kept there by hash and loaded back on a prefix
  /// hit instead of recomputed (docs/engine.md, "Host KV tier"). 0: none. Needs prefix caching.
  int64_t kv_offloading_bytes = 0;
  int max_num_batched_tokens = 2048;       // --max-num-batched-tokens
  int max_num_seqs = 256;                  // --max-num-seqs
  int64_t max_model_len = 0;               // --max-model-len; 0 = the model's maximum
  std::string scheduling_policy = "fcfs";  // --scheduling-policy: fcfs or priority
  bool enforce_eager = false;              // --enforce-eager: no CUDA graphs
  /// --cpu-bf16-matmul: exact (fp32 products, the reference) or round (activations rounded to bf16
  /// in the CPU's prefill matmuls with bf16 weights: about twice as fast without AMX).
  std::string cpu_bf16_matmul = "exact";
  /// --cpu-matmul: batch-invariant (the default: a request's log-probabilities have the same bits
  /// alone and in any batch) or onednn (oneDNN past the decode sizes: faster prefill, a row's last
  /// bits depending on the batch); docs/engine.md, "Numerics". --cpu-bf16-matmul round implies
  /// onednn. A build without oneDNN is batch-invariant either way.
  std::string cpu_matmul = "batch-invariant";
  RuntimeOptions runtime;  // tuning knobs (PAGODA_* at the command line)
  /// --distributed-executor-backend: uni (the model on the engine thread) or mp (in a worker
  /// process that the engine talks to over a socket).
  std::string distributed_executor_backend = "uni";
  /// --tensor-parallel-size (-tp): the model split over this many worker processes (CPU; backend
  /// mp), each holding its slices of the weights and its heads' KV cache (docs/engine.md,
  /// "Tensor parallelism"). --kv-cache-memory is then each rank's.
  int tensor_parallel_size = 1;
  /// --decode-context-parallel-size (-dcp): groups of this many of the tensor-parallel ranks
  /// spread each sequence's KV cache over their members by position instead of holding copies
  /// (docs/engine.md, "Decode context parallelism"); divides tensor_parallel_size. CPU only.
  int decode_context_parallel_size = 1;
  /// Speculative drafts from a hook: after each sampled token, up to num_speculative_tokens drafts
  /// that the next step verifies (as speculative_config's, always K). Gets the request's tokens.
  /// For tests; speculative_config is the engine's own proposer.
  std::function<std::vector<int32_t>(std::span<const int32_t>)> speculative_proposer;
  int num_speculative_tokens = 0;
  /// --speculative-config; nullopt: no speculation (the hook above aside).
  std::optional<SpeculativeConfig> speculative_config;
  /// --kv-transfer-config; nullopt: no prefill/decode disaggregation.
  std::optional<KVTransferConfig> kv_transfer_config;
  /// Structured outputs' jump-forward: up to this many tokens of the text a request's grammar
  /// forces next are proposed as drafts of a greedy constrained request stepping alone, and kept
  /// where the model draws them (outputs unchanged, fewer steps). 0: off.
  int structured_outputs_jump_forward = 15;  // 1 + 15 rows: a decode graph (up to 16)
  /// Called with the fraction of the weights loaded (0..1) during the constructor; may be empty.
  std::function<void(double)> load_progress;
  /// For tests only (fault injection); empty otherwise. Called with a request's id at each of its
  /// stages in the engine loop: what it throws fails that request alone, as a real error there
  /// would. Called on the engine thread, and for kSample on the pool's threads too.
  std::function<void(RequestStage, const std::string& request_id)> fault_hook;
};

}  // namespace pagoda
