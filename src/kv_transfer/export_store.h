#pragma once
// The producer's side of prefill/decode disaggregation: the KV of finished prefills, kept until a
// consumer pulls it or a timeout frees it.
//
// How it works. When a `do_remote_decode` request's prefill ends, the engine copies its full
// prompt blocks out of the device pool into one ExportedKV (with a checksum per block) and puts
// it here under the request's id; the device blocks go back to the pool (and its prefix cache)
// at once, so a slow or dead consumer never holds the producer's device memory. A pull takes the
// entry (each is served once); entries not pulled within the keep timeout are freed by expire(),
// which the transfer server calls periodically, and counted.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace pagoda::kv_transfer {

/// XXH3-64 of a block's bytes: what a consumer recomputes to detect a corrupted block.
[[nodiscard]] uint64_t block_checksum(std::span<const std::byte> bytes);

/// The KV layout both ends must share for a block's bytes to mean the same: XXH3-64 of
/// `description` (model, architecture, KV dtype and layout, block size; the engine writes it).
[[nodiscard]] uint64_t layout_fingerprint(std::string_view description);

/// A sample of a checkpoint's weights for the layout description: two checkpoints of one shape
/// under one directory name (a base model and its fine-tune) differ here. XXH3-64 over each
/// *.safetensors file of `dir` in name order: its name, its size, and its first and last MiB (the
/// header and both ends of the data), so 2 MiB read per file, at start-up. 0 when there is none.
[[nodiscard]] uint64_t checkpoint_sample(const std::string& dir);

/// The exported prompt KV of one request.
struct ExportedKV {
  uint64_t fingerprint = 0;  // layout_fingerprint of the producer
  int32_t block_size = 0;    // tokens per block
  int64_t block_bytes = 0;   // bytes per block (K and V of every layer)
  /// [num_blocks * block_size]: the prompt tokens whose KV the blocks hold, so that a consumer
  /// can check they are its own prompt's.
  std::vector<int32_t> token_ids;
  std::vector<uint64_t> checksums;  // [num_blocks]: block_checksum of each block
  /// [num_blocks, block_bytes]: block i at [i * block_bytes, (i + 1) * block_bytes), laid out as
  /// Model::export_kv_block writes one block.
  std::vector<std::byte> bytes;

  [[nodiscard]] int32_t num_blocks() const { return static_cast<int32_t>(checksums.size()); }
  /// Block i's bytes. Example: block_bytes 4096, i 2 -> bytes [8192, 12288).
  [[nodiscard]] std::span<const std::byte> block(int32_t i) const {
    const auto n = static_cast<size_t>(block_bytes);
    return std::span<const std::byte>(bytes).subspan(static_cast<size_t>(i) * n, n);
  }
  /// Fills checksums from bytes.
  void compute_checksums();
};

/// Thread-safe: the engine thread puts, the transfer server's thread takes and expires.
class KVExportStore {
 public:
  using Clock = std::chrono::steady_clock;
  /// `keep_timeout`: how long an entry waits for its pull.
  explicit KVExportStore(std::chrono::milliseconds keep_timeout) : keep_timeout_(keep_timeout) {}

  /// Keeps `kv` under `request_id` until taken or expired (an entry under the same id is
  /// replaced, its blocks counted as freed).
  void put(const std::string& request_id, std::shared_ptr<const ExportedKV> kv,
           Clock::time_point now = Clock::now());
  /// Why take() returned no entry.
  enum class TakeError { kNone, kUnknown, kLayoutMismatch };
  /// Removes and returns the entry if its fingerprint is `fingerprint`; nullptr when unknown,
  /// already pulled or past its deadline (an expired one is freed and counted here), or of
  /// another layout (it stays, for a consumer of the right layout or the timeout).
  [[nodiscard]] std::shared_ptr<const ExportedKV> take(const std::string& request_id,
                                                       uint64_t fingerprint, TakeError& error,
                                                       Clock::time_point now = Clock::now());
  /// Frees the entries past their deadline; returns how many blocks they held.
  int64_t expire(Clock::time_point now = Clock::now());
  /// A pull delivered `num_blocks` blocks (the server counts after the last byte is written).
  void count_sent(int64_t num_blocks);

  [[nodiscard]] std::chrono::milliseconds keep_timeout() const { return keep_timeout_; }
  [[nodiscard]] int64_t blocks_sent() const;
  [[nodiscard]] int64_t blocks_freed_by_timeout() const;
  [[nodiscard]] int64_t num_pending_blocks() const;  // blocks of the entries held now
  [[nodiscard]] int64_t num_pending_entries() const;

 private:
  struct Entry {
    std::shared_ptr<const ExportedKV> kv;
    Clock::time_point deadline;
  };
  const std::chrono::milliseconds keep_timeout_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  int64_t pending_blocks_ = 0;
  int64_t blocks_sent_ = 0;
  int64_t blocks_freed_by_timeout_ = 0;
};

}  // namespace pagoda::kv_transfer
