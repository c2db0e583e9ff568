#pragma once
// The engine's side of prefill/decode disaggregation (--kv-transfer-config): PagodaConnector.
//
// How it works.
//   Producer: when a `do_remote_decode` request's prompt is computed (the step that samples its
//   first token), export_prompt() copies its full prompt blocks (those a consumer can use: the
//   last prompt token is always recomputed, so (prompt_len - 1) / block_size blocks) out of the
//   device in one executor call, checksums each block, and keeps them in the KVExportStore under
//   the request's id; the transfer server serves them to one pull, or frees them after the keep
//   timeout. The request finishes after that first token, its kv_transfer_params saying where
//   the blocks are.
//   Consumer: a `do_remote_prefill` request enters the scheduler waiting for remote KV (no
//   blocks, not scheduled) while start_pull() fetches its blocks asynchronously on the
//   transport's thread; other requests keep running. The engine loop takes the arrivals: blocks
//   whose checksums, layout fingerprint, block shape and token ids all match become the
//   request's received blocks and it joins the waiting queue with them; on any failure it joins
//   with none (a local prefill). At admission the KV cache manager gives the received blocks
//   fresh device blocks (after any device prefix hit) and counts them computed; before_launch()
//   copies their bytes in before the step runs, so the step computes only the rest (the last
//   partial block and the last token).
//   Bi-directional KV (both engines kv_both): a `return_kv` request's finished turn (prompt and
//   generated tokens) is exported the same way by export_blocks() on the engine that decoded it,
//   its hand-off in the final output; the engine that prefills the next turn pulls it with
//   start_pull() and accept_import() and caches the blocks (engine_kv_return.cc).
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv_transfer/export_store.h"
#include "kv_transfer/transport.h"
#include "pagoda/engine_args.h"
#include "pagoda/request_output.h"
#include "runtime/executor.h"

namespace pagoda {

struct EngineRequest;
struct EngineStats;
struct ModelConfig;

/// What both ends must agree on for a block's bytes to mean the same, as text (its hash is the
/// fingerprint): the model, its KV layout and dtype, and the block size.
struct KVLayoutInfo {
  std::string description;
  int block_size = 0;
  int64_t block_bytes = 0;
};

class KVConnector {
 public:
  /// A pull's result, as the engine loop takes it.
  struct Arrival {
    kv::RequestId id = 0;
    kv_transfer::PullResult result;
  };

  /// Starts the transfer server (producer) and the puller (consumer) as the role asks. `wake` is
  /// called (on the transport's thread) after each arrival. `executor` and `kv` must outlive it.
  KVConnector(const KVTransferConfig& config, KVLayoutInfo layout, Executor& executor,
              kv::KVCacheManager& kv, std::function<void()> wake);
  ~KVConnector();

  [[nodiscard]] const KVTransferConfig& config() const { return config_; }
  [[nodiscard]] int port() const;  // the transfer port (producer), else 0
  [[nodiscard]] uint64_t fingerprint() const { return fingerprint_; }

  // ---- Producer ----
  /// Exports the first (prompt.size() - 1) / block_size blocks of `block_table` (one executor
  /// copy; no step may be in flight) under `request_id` and returns the hand-off.
  [[nodiscard]] KVTransferParams export_prompt(const std::string& request_id,
                                               std::span<const int32_t> prompt,
                                               std::span<const kv::BlockId> block_table);
  /// Exports blocks `block_ids` ([token_ids.size() / block_size], full blocks holding
  /// `token_ids` in order; one executor copy, no step in flight) under `request_id` and returns
  /// the hand-off. export_prompt's second half; a finished turn's return uses it directly.
  [[nodiscard]] KVTransferParams export_blocks(const std::string& request_id,
                                               std::span<const int32_t> token_ids,
                                               std::span<const kv::BlockId> block_ids);
  /// The hand-off export_blocks() will return for `block_ids` under `request_id`.
  [[nodiscard]] KVTransferParams hand_off(const std::string& request_id,
                                          std::span<const kv::BlockId> block_ids) const;

  // ---- Consumer ----
  /// Pulls `remote`'s blocks for request `id`; the result arrives through take_arrivals().
  void start_pull(kv::RequestId id, const KVTransferParams& remote);
  [[nodiscard]] bool has_arrivals() const;
  [[nodiscard]] std::vector<Arrival> take_arrivals();
  /// Checks an arrival against the request's prompt: the number of blocks it may load (0 on a
  /// failed pull or a mismatch, with the reason in `why`). Counts bytes, latency and failures.
  [[nodiscard]] int accept(Arrival& arrival, std::span<const int32_t> prompt, std::string& why);
  /// Bi-directional KV: checks an import's arrival (a finished turn pulled back). The blocks, or
  /// null with the reason in `why` (a failed pull, or tokens not a whole number of blocks).
  /// Counts bytes, latency, and imported blocks or failed imports.
  [[nodiscard]] std::shared_ptr<kv_transfer::ExportedKV> accept_import(Arrival& arrival,
                                                                       std::string& why);
  /// Counts blocks a finished turn kept for a pull back (`returned`), and imported blocks placed
  /// in the prefix cache (`imported`).
  void count_returned(int64_t blocks) { returned_blocks_ += blocks; }
  void count_imported(int64_t blocks) { imported_blocks_ += blocks; }
  /// Copies the received blocks the KV cache manager allocated since the last call into the
  /// device (one executor call) and drops what was loaded. Call right before the step launches.
  void before_launch();
  /// Forgets request `id`'s received blocks (it finished or was aborted).
  void drop(kv::RequestId id) { received_.erase(id); }

  /// The consumer's counters into `stats` (engine thread).
  void fill_consumer_stats(EngineStats& stats) const;
  /// The producer's counters into `stats` (any thread: the store is thread-safe).
  void fill_producer_stats(EngineStats& stats) const;

  /// Counters for EngineStats (engine thread).
  [[nodiscard]] int64_t received_tokens() const { return received_tokens_; }
  [[nodiscard]] int64_t received_bytes() const { return received_bytes_; }
  [[nodiscard]] int64_t failures() const { return failures_; }
  [[nodiscard]] const std::vector<int64_t>& latency_counts() const { return latency_counts_; }
  [[nodiscard]] double latency_sum() const { return latency_sum_; }
  [[nodiscard]] const kv_transfer::KVExportStore* store() const { return store_.get(); }
  [[nodiscard]] int num_received() const { return static_cast<int>(received_.size()); }

 private:
  /// Counts a finished pull (an admission's or an import's): bytes and the latency histogram.
  void record_pull(const kv_transfer::PullResult& r);
  KVTransferConfig config_;
  KVLayoutInfo layout_;
  uint64_t fingerprint_ = 0;
  Executor& executor_;
  kv::KVCacheManager& kv_;
  std::function<void()> wake_;
  std::unique_ptr<kv_transfer::KVExportStore> store_;  // producer
  std::unique_ptr<kv_transfer::KVServer> server_;      // producer
  std::unique_ptr<kv_transfer::KVPuller> puller_;      // consumer
  std::string engine_id_;

  mutable std::mutex arrivals_mutex_;
  std::vector<Arrival> arrivals_;  // filled on the puller's thread

  // Engine thread: each request's accepted blocks until they are loaded.
  std::unordered_map<kv::RequestId, std::shared_ptr<kv_transfer::ExportedKV>> received_;
  std::vector<std::byte> staging_;  // [loads, block_bytes], reused
  std::vector<int32_t> staging_ids_;
  int64_t received_tokens_ = 0;
  int64_t received_bytes_ = 0;
  int64_t failures_ = 0;
  int64_t returned_blocks_ = 0;  // bi-directional KV: finished turns' blocks kept for a pull
  int64_t imported_blocks_ = 0;  // ... and blocks pulled back into the prefix cache
  int64_t import_failures_ = 0;  // ... and imports that failed (nothing cached)
  std::vector<int64_t> latency_counts_;  // [kKVTransferLatencyBuckets.size() + 1]
  double latency_sum_ = 0;
};

/// The engine's connector for args.kv_transfer_config (which must be set): checks what the
/// transfer cannot carry (InvalidArgument: --calculate-kv-scales, a draft model) and builds it
/// with this engine's layout (model, KV cache, block size).
[[nodiscard]] std::unique_ptr<KVConnector> make_kv_connector(
    const EngineArgs& args, const ModelConfig& config, const ExecutorInfo& info, Executor& executor,
    kv::KVCacheManager& kv, std::function<void()> wake);

/// Checks a request's kv_transfer_params against the engine's role (InvalidArgument naming
/// kv_transfer_params; `connector` null: no --kv-transfer-config) and makes a do_remote_decode
/// request a prefill (max_tokens 1, vLLM's rule). return_kv needs the producer's half (a store
/// and a transfer port: kv_producer or kv_both).
void check_kv_transfer_request(const KVConnector* connector, EngineRequest& request);

}  // namespace pagoda
