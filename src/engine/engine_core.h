#pragma once
// EngineCore: one thread owns the scheduler, the KV cache manager, the model runner and the
// samplers, and loops schedule -> execute -> sample -> update -> emit. Any thread may submit
// requests (each gets its own OutputStream) and abort them.
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/output_stream.h"
#include "pagoda/engine_args.h"
#include "sampling/sampling_params.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

class Model;
struct ModelConfig;

/// One request as callers submit it: a text prompt or token ids, and how to sample.
struct EngineRequest {
  std::string request_id;  // empty: the engine names it
  std::optional<std::string> prompt;
  std::vector<int32_t> prompt_token_ids;  // used when prompt is empty
  bool add_special_tokens = true;         // for text prompts: BOS as the tokenizer configures it
  SamplingParams params;
  int priority = 0;        // lower runs first under --scheduling-policy priority
  std::string cache_salt;  // requests with different salts never share cached KV blocks
  /// Prefill/decode disaggregation (vLLM's kv_transfer_params). do_remote_decode (a producer):
  /// prefill, stop after the first token, keep the prompt's KV for a consumer and return where it
  /// is in RequestOutput::kv_transfer_params. do_remote_prefill (a consumer): pull the prompt's KV
  /// from `remote` instead of computing it (falling back to computing it on any failure).
  bool do_remote_decode = false;
  bool do_remote_prefill = false;
  KVTransferParams remote;  // with do_remote_prefill
  /// Bi-directional KV (pagoda's kv_transfer_params key return_kv, on an engine with the producer
  /// half: kv_both): when the request finishes, keep its full blocks (prompt and generated tokens
  /// whose KV is computed) for a pull, named in the final output's kv_transfer_params, so that
  /// the engine prefilling the next turn can import them (EngineCore::import_kv).
  bool return_kv = false;
};

/// What EngineCore::import_kv did: the blocks of the finished turn placed in the prefix cache.
struct KVImportResult {
  int num_blocks = 0;       // full blocks the pull brought
  int imported_blocks = 0;  // placed in the prefix cache (their bytes loaded)
  int cached_blocks = 0;    // already in the prefix cache: kept, not loaded again
  std::string error;        // why nothing was imported (the pull failed, ...); empty otherwise
};

/// Upper bounds (inclusive) of the buckets of tokens per engine step: vLLM's
/// iteration_tokens_total buckets (vllm/v1/metrics/loggers.py), past the last one +Inf.
inline constexpr std::array<int64_t, 13> kIterationTokensBuckets = {
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

/// A histogram of tokens per engine step over kIterationTokensBuckets.
struct IterationTokens {
  /// [kIterationTokensBuckets.size() + 1] steps per bucket, not cumulative; the last is +Inf.
  std::array<int64_t, kIterationTokensBuckets.size() + 1> counts{};
  int64_t sum = 0;    // tokens over all steps
  int64_t count = 0;  // steps
  /// Counts one step of `tokens` tokens into the first bucket whose bound is >= tokens.
  void observe(int64_t tokens) {
    size_t i = 0;
    while (i < kIterationTokensBuckets.size() && tokens > kIterationTokensBuckets[i]) ++i;
    ++counts[i];
    sum += tokens;
    ++count;
  }
};

/// Upper bounds (seconds, inclusive) of the KV transfer latency histogram's buckets.
inline constexpr std::array<double, 12> kKVTransferLatencyBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0};

/// The KV cache as the engine built it, for vLLM's cache_config_info gauge.
struct CacheInfo {
  int block_size = 0;                   // tokens per block (--block-size)
  int64_t num_blocks = 0;               // blocks of the pool, the reserved null block included
  bool enable_prefix_caching = false;   // --[no-]enable-prefix-caching
  double gpu_memory_utilization = 0;    // --gpu-memory-utilization (fraction, used on a GPU)
  int64_t kv_cache_memory_bytes = 0;    // --kv-cache-memory as given (bytes); 0: automatic
  int sliding_window = 0;               // the model's sliding window (tokens); 0: none
  std::string cache_dtype = "float32";  // the cache's element type, kv::kv_cache_dtype_name
  bool calculate_kv_scales = false;     // --calculate-kv-scales
  int64_t kv_offloading_bytes = 0;      // --kv-offloading-size as given (bytes); 0: no host tier
  int64_t host_kv_blocks = 0;           // blocks the host tier holds at most; 0: no host tier
};

/// Counters and gauges of the engine, readable from any thread.
struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  double kv_cache_usage = 0;  // fraction of KV blocks in use
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries_tokens = 0;
  int64_t prefix_cache_hits_tokens = 0;  // found on the device
  // The host KV tier (--kv-offloading-size), vLLM's external prefix cache: tokens looked up while
  // it is on and tokens found there (loaded instead of computed); blocks copied into it (new
  // hashes only) and back to the device; the fraction of its blocks in use.
  int64_t external_prefix_cache_queries_tokens = 0;
  int64_t external_prefix_cache_hits_tokens = 0;
  int64_t host_kv_blocks_saved = 0;
  int64_t host_kv_blocks_loaded = 0;
  double host_kv_cache_usage = 0;
  // Prefill/decode disaggregation (--kv-transfer-config). Consumer: prompt tokens whose KV was
  // received and loaded instead of computed, bytes received, pulls that failed (fallen back to a
  // local prefill), and the pulls' latency. Producer: blocks sent, blocks freed unpulled by the
  // keep timeout, and blocks held for consumers now.
  int64_t kv_transfer_received_tokens = 0;
  int64_t kv_transfer_received_bytes = 0;
  int64_t kv_transfer_failures = 0;
  /// [kKVTransferLatencyBuckets.size() + 1] pulls per latency bucket, not cumulative (+Inf last).
  std::vector<int64_t> kv_transfer_latency_counts;
  double kv_transfer_latency_sum = 0;
  int64_t kv_transfer_blocks_sent = 0;
  int64_t kv_transfer_blocks_freed_timeout = 0;
  int64_t kv_transfer_pending_blocks = 0;
  // Bi-directional KV: blocks of finished return_kv turns kept for a pull back; blocks imported
  // into the prefix cache, imports that failed, and the tokens of prefix hits on imported blocks
  // (part of prefix_cache_hits_tokens).
  int64_t kv_transfer_returned_blocks = 0;
  int64_t kv_transfer_imported_blocks = 0;
  int64_t kv_transfer_import_failures = 0;
  int64_t prefix_cache_imported_hits_tokens = 0;
  int64_t prompt_tokens = 0;      // computed prompt tokens (cache hits excluded)
  int64_t generation_tokens = 0;  // sampled tokens
  int64_t num_steps = 0;
  /// Tokens per completed step: prompt tokens computed plus tokens sampled (vLLM's
  /// iteration_tokens_total).
  IterationTokens iteration_tokens;
  // Speculative decoding, vLLM's spec_decode counters: verifications ((request, step) pairs with
  // drafts), drafts verified, drafts accepted, and [K] accepted per draft position.
  int64_t spec_decode_num_drafts = 0;
  int64_t spec_decode_num_draft_tokens = 0;
  int64_t spec_decode_num_accepted_tokens = 0;
  std::vector<int64_t> spec_decode_num_accepted_tokens_per_pos;
  // Where the engine thread's time goes (seconds, summed over steps): waiting for the device,
  // the serial host work between a step's end and the next launch (sampling on the host,
  // scheduling, batch assembly: the device idles), and emitting tokens (detokenize, stop strings,
  // push to the streams), which overlaps the next step on the device.
  struct StepTimes {
    double device_wait_seconds = 0;
    double host_serial_seconds = 0;
    double emit_seconds = 0;
    double launch_seconds = 0;  // the part of host_serial_seconds spent in ModelRunner::launch
    // The same for steps in which every request computed one token (decodes only).
    int64_t num_decode_steps = 0;
    double decode_device_wait_seconds = 0;
    double decode_host_serial_seconds = 0;
  } step_times;
};

/// The engine: continuous batching over a paged KV cache on one model.
class EngineCore {
 public:
  /// Loads the model and tokenizer, sizes the KV cache and starts the engine thread.
  explicit EngineCore(const EngineArgs& args);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  /// Validates the request on the calling thread (InvalidArgument naming the field, nothing
  /// queued) and queues it. The stream yields the request's updates and closes when it finishes.
  [[nodiscard]] std::shared_ptr<OutputStream> submit(EngineRequest request);
  /// Aborts a request at any moment; its KV blocks are freed at the next loop turn. Unknown or
  /// finished ids are ignored.
  void abort(const std::string& request_id);
  /// Bi-directional KV: pulls a finished turn's blocks (the kv_transfer_params of a return_kv
  /// request's answer on another engine) into this engine's prefix cache, hashed with
  /// `cache_salt` (the conversation's), so that a prompt continuing that turn only computes its
  /// new tokens. Checks on the calling thread (InvalidArgument: no kv_both/kv_consumer role,
  /// prefix caching off, a hand-off without an address); `done` runs once, on the engine thread,
  /// when the blocks are in or the pull failed (any failure only costs a recompute later).
  void import_kv(const KVTransferParams& params, std::string cache_salt,
                 std::function<void(KVImportResult)> done);
  /// Stops the engine thread; unfinished requests end with finish_reason abort.
  void shutdown();

  [[nodiscard]] const ModelConfig& model_config() const;
  [[nodiscard]] const std::optional<Tokenizer>& tokenizer() const { return tokenizer_; }
  [[nodiscard]] int64_t max_model_len() const { return max_model_len_; }
  /// Rows of the model's embedding (may exceed the tokenizer's vocabulary: padded checkpoints).
  [[nodiscard]] int64_t vocab_size() const;
  [[nodiscard]] int64_t kv_capacity_tokens() const { return kv_capacity_tokens_; }
  [[nodiscard]] const CacheInfo& cache_info() const { return cache_info_; }
  /// --scheduling-policy priority: requests may set a priority (under fcfs only 0, as vLLM).
  [[nodiscard]] bool priority_scheduling() const { return priority_scheduling_; }
  [[nodiscard]] EngineStats stats() const;
  /// Empty while the engine can serve; else why it never will again (a tensor-parallel rank that
  /// exited, named): `serve` then stops and /health answers 503. Any thread may ask.
  [[nodiscard]] std::string fatal_error() const;
  /// --kv-transfer-config: the producer's transfer port (the ephemeral one chosen for port 0);
  /// 0 without a producer role.
  [[nodiscard]] int kv_transfer_port() const;
  [[nodiscard]] bool kv_transfer_enabled() const;
  /// --kv-transfer-config: the layout fingerprint both ends compare (model, KV dtype and layout,
  /// block size); 0 without it.
  [[nodiscard]] uint64_t kv_transfer_fingerprint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::optional<Tokenizer> tokenizer_;
  int64_t max_model_len_ = 0;
  int64_t kv_capacity_tokens_ = 0;
  CacheInfo cache_info_;
  bool priority_scheduling_ = false;
};

}  // namespace pagoda
