#pragma once
// Per-request KV block tables over one BlockPool, with prefix caching: the narrow handle the
// scheduler allocates through and the model runner reads block tables from.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/host_kv_tier.h"
#include "kv/kv_cache_config.h"
#include "kv/types.h"

namespace pagoda::kv {

/// What the manager reads of a request, borrowed for the duration of one call.
struct KVRequestView {
  RequestId request_id = 0;
  /// Prompt + output tokens so far. Leave out unverified speculative (draft) tokens: their KV may
  /// be rejected, so the blocks holding them must never enter the prefix cache.
  std::span<const TokenId> token_ids;
  /// Tokens whose KV this request's blocks already hold, before this call's prefix hits.
  int num_computed_tokens = 0;
  /// Tenant isolation: requests with different salts never share blocks. Empty means no salt.
  std::string_view cache_salt;
  /// Prefill/decode disaggregation: the first num_external_blocks full blocks of token_ids whose
  /// KV the engine holds as bytes received from a producer. A prefix lookup continues with them
  /// where the device cache stops (the host tier is then not consulted).
  int num_external_blocks = 0;
};

/// A request's longest cached prefix, from get_computed_blocks(), for allocate_slots(): blocks
/// cached on the device, then the blocks that continue the chain in the host tier.
/// Example (block_size 16, 70 tokens): blocks 0-1 on the device and 2-3 in the host tier give
/// block_ids [7, 3], block_hashes [h0, h1], host_block_hashes [h2, h3], num_computed_tokens 64.
struct ComputedBlocks {
  std::vector<BlockId> block_ids;       // logical block i of the request is block_ids[i]
  std::vector<BlockHash> block_hashes;  // the hash each block was found by
  /// Logical blocks block_ids.size() + j, found in the host tier by these hashes: allocate_slots
  /// gives them fresh device blocks that take_host_loads() hands to the engine to fill.
  std::vector<BlockHash> host_block_hashes;
  /// Logical blocks block_ids.size() + j for j < num_external_blocks (never with host hits):
  /// received from a producer (KVRequestView::num_external_blocks); allocate_slots gives them
  /// fresh device blocks that take_external_loads() hands to the engine to fill.
  /// Example (block_size 16, 70 tokens, 4 external blocks, block 0 cached on the device):
  /// block_ids [7], num_external_blocks 3 (logical blocks 1-3), num_computed_tokens 64.
  int num_external_blocks = 0;
  /// (block_ids.size() + host_block_hashes.size() + num_external_blocks) * block_size
  int num_computed_tokens = 0;

  [[nodiscard]] bool empty() const {
    return block_ids.empty() && host_block_hashes.empty() && num_external_blocks == 0;
  }
};

/// A received block to copy into the device before the next step: logical block `index` of
/// request `request_id`, device block `block`.
struct ExternalKVLoad {
  RequestId request_id = 0;
  int index = 0;
  BlockId block = kNullBlockId;
  friend bool operator==(const ExternalKVLoad&, const ExternalKVLoad&) = default;
};

/// One block to copy between the device cache and the host tier: device block `block`, whose
/// content the hash `hash` names.
struct HostKVCopy {
  BlockId block = kNullBlockId;
  BlockHash hash;
  friend bool operator==(const HostKVCopy&, const HostKVCopy&) = default;
};

/// A block of KV from another engine that import_blocks() placed: logical block `index` of the
/// imported chain goes to device block `block`, whose bytes the engine must write.
struct ImportedBlock {
  int index = 0;
  BlockId block = kNullBlockId;
  friend bool operator==(const ImportedBlock&, const ImportedBlock&) = default;
};

/// What import_blocks() did with a chain of imported blocks.
struct ImportedBlocks {
  std::vector<ImportedBlock> placed;  // the blocks whose bytes the engine must write
  int num_cached = 0;                 // blocks the device cache held already (kept)
};

/// A block the model runner must copy before the step runs (copy-on-write of a fork).
struct BlockCopy {
  BlockId src = kNullBlockId;
  BlockId dst = kNullBlockId;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

/// The result of a successful fork().
struct ForkResult {
  /// Set when the fork point falls inside a block: the child's own copy of that partial block.
  std::optional<BlockCopy> copy_on_write;
};

/// Prefix-cache counters in tokens, monotonic (Prometheus counters). Queries count every token of
/// every request looked up; hits count the tokens found cached.
struct PrefixCacheStats {
  int64_t queries_tokens = 0;
  int64_t hits_tokens = 0;

  [[nodiscard]] double hit_rate() const {
    return queries_tokens == 0 ? 0.0 : static_cast<double>(hits_tokens) / queries_tokens;
  }
};

/// Owns every request's block table: finds cached prefixes, allocates blocks on demand as tokens
/// are scheduled (never reserving for max length), caches full blocks, forks and frees.
///
/// Misuse by the engine (unknown parent, a prefix hit for a request that already holds blocks,
/// stale computed blocks) is a bug in pagoda and fails a PAGODA_CHECK; user-facing config errors
/// throw InvalidArgument. Single-threaded: the engine thread owns it.
class KVCacheManager {
 public:
  /// Validates the config (InvalidArgument) and builds the pool. `host_tier` (may be null; it
  /// must outlive the manager) is a host-memory tier behind the pool: prefix lookups continue in
  /// it, and the pool's evicted blocks are offered to it (take_host_saves). A host tier needs
  /// prefix caching (InvalidArgument otherwise).
  explicit KVCacheManager(const KVCacheConfig& config, HostKVTier* host_tier = nullptr);

  /// The longest run of cached full blocks at the start of `request`'s tokens, for a request that
  /// holds no blocks yet (new, or preempted and freed): device blocks, then (with a host tier) the
  /// blocks after them that the host tier holds, up to the first block found in neither (a block
  /// on the device after a host hit is not used: the chain continues in the host tier only).
  /// Never the whole sequence: the last token is always left to compute, since the step must
  /// produce its logits. Counts one query of token_ids.size() tokens and the hit tokens, device
  /// and host apart. Empty (and uncounted) with prefix caching off.
  /// The result is only valid until the next allocation: pass it straight to allocate_slots().
  [[nodiscard]] ComputedBlocks get_computed_blocks(const KVRequestView& request);

  /// Makes room for `num_new_tokens` more tokens (plus `num_lookahead_tokens` speculative slots)
  /// after the request's computed tokens and `new_computed_blocks` (a prefix hit, only for a
  /// request without blocks), and caches the blocks that this step fills completely.
  /// Returns the newly allocated block ids (appended to the block table), or nullopt when the
  /// pool cannot fit them; on nullopt nothing changed. Hit blocks that were free count against
  /// the free blocks, since taking them removes them from the free queue. Host hits take the
  /// first new blocks, queued for take_host_loads().
  [[nodiscard]] std::optional<std::vector<BlockId>> allocate_slots(
      const KVRequestView& request, int num_new_tokens,
      const ComputedBlocks& new_computed_blocks = {}, int num_lookahead_tokens = 0);

  /// Releases every block of the request at once (finish, abort or preemption), last block first
  /// so that a sequence's tail is evicted before its more shareable head. Cached blocks stay
  /// findable until evicted; with `drop_pending` (a preemption inside the scheduling window,
  /// whose step will not write the request's share), pending blocks (begin_window) that only this
  /// request holds lose their hashes. Idempotent: an unknown or already freed id is a no-op, so an
  /// abort may race with a finish.
  void free(RequestId request_id, bool drop_pending = false);

  /// A scheduling window begins (Scheduler::schedule, once per step). Why: allocate_slots caches
  /// the blocks a step will fill before the step runs, and a request may still be preempted (or
  /// aborted) in the same window, after which its step never writes them. So blocks cached within
  /// the current window are pending: a prefix lookup stops at them (the later, same-window
  /// sharers recompute those tokens instead of reading KV that may never be written), and a
  /// preemption (free with drop_pending) uncaches a pending block that only its request holds. The
  /// next window's lookups find them: by then the step that writes them runs first. Example: A
  /// fills block 7 (hash h) in window 3 and is preempted by a more urgent request in the same
  /// window: h is dropped, so a later prompt with A's prefix recomputes it instead of reading block
  /// 7's stale KV. A manager whose windows never begin treats every cached block as written (tests
  /// of the manager alone).
  void begin_window();

  /// For n > 1: `child_id` (new) shares the parent's first num_computed_tokens / block_size blocks
  /// (one more reference each) and gets a fresh block for the partial block after them, which the
  /// model runner must copy from the parent's before the next step (`copy_on_write`). The copy is
  /// made eagerly: both sequences write that block at their next step anyway. Returns nullopt,
  /// changing nothing, when no block is free for the copy.
  [[nodiscard]] std::optional<ForkResult> fork(RequestId parent_id, RequestId child_id,
                                               int num_computed_tokens);

  /// The request's block table, logical block i -> physical block. Valid until the next
  /// mutating call. The request must be known (has_request).
  [[nodiscard]] std::span<const BlockId> block_table(RequestId request_id) const;
  [[nodiscard]] bool has_request(RequestId request_id) const;
  [[nodiscard]] int num_requests() const { return static_cast<int>(requests_.size()); }

  [[nodiscard]] int num_free_blocks() const { return pool_.num_free_blocks(); }
  /// Fraction of usable blocks held by requests, in [0, 1] (cached free blocks count as free).
  [[nodiscard]] double usage() const { return pool_.usage(); }
  [[nodiscard]] const PrefixCacheStats& prefix_cache_stats() const { return stats_; }
  /// The host tier's share of the lookups (vLLM's external prefix cache): queries count the
  /// tokens of every lookup while a host tier is attached, hits the tokens found there.
  [[nodiscard]] const PrefixCacheStats& host_cache_stats() const { return host_stats_; }
  /// Tokens of device prefix hits on blocks that import_blocks() placed (part of
  /// prefix_cache_stats().hits_tokens): the KV another engine computed.
  [[nodiscard]] int64_t imported_hits_tokens() const { return imported_hits_tokens_; }

  /// Bi-directional KV: caches KV blocks computed by another engine (a consumer's finished turn)
  /// so that later prompts starting with the same tokens hit them. `token_ids`
  /// [num_blocks * block_size] are the tokens the blocks hold, hashed as a request's with
  /// `cache_salt`. Each block the device cache lacks gets a free block (the least recently used
  /// cached block is evicted for it), cached under its hash and freed again at once: it is then
  /// a cached free block like a finished request's, findable until evicted (the chain's tail
  /// first). Blocks the cache holds are kept, and the chain's blocks are held while the others
  /// are placed, so that placing block i never evicts block j < i. Stops at the first block
  /// with no room (the blocks after a missing one can never be hit). Returns the blocks whose
  /// bytes the caller must write before the next step launches, with no step in flight (their
  /// hashes are not pending: the next lookup may hit them). Empty with prefix caching off.
  /// Example (block_size 16, 64 tokens, blocks 0-1 cached as 7 and 3, 5 free blocks): blocks 0-1
  /// stay, 2-3 get fresh blocks, say 9 and 4: placed [{2, 9}, {3, 4}], num_cached 2.
  [[nodiscard]] ImportedBlocks import_blocks(std::span<const TokenId> token_ids,
                                             std::string_view cache_salt);
  /// Uncaches blocks import_blocks() placed whose bytes could not be written (a failed copy), so
  /// that no lookup ever hits them; a block reused since is left alone.
  void uncache_imported(std::span<const ImportedBlock> blocks);

  /// The device blocks to copy into the host tier before the next step runs: the cached blocks
  /// the pool evicted since the last call whose hashes the tier lacks (those it has are made its
  /// most recently used instead). Leaves out a block cached and evicted again since the last call:
  /// its KV was to be written by a step that has not run. Call it after schedule() and before the
  /// step launches (the evicted blocks still hold their KV until then); empty without a host tier.
  [[nodiscard]] std::vector<HostKVCopy> take_host_saves();
  /// The host tier's blocks to copy into the device blocks allocate_slots() gave the host hits
  /// since the last call, before the next step runs; a block evicted again since is left out.
  [[nodiscard]] std::vector<HostKVCopy> take_host_loads();
  /// The received blocks to copy into the device blocks allocate_slots() gave them since the last
  /// call, before the next step runs (prefill/decode disaggregation's consumer).
  [[nodiscard]] std::vector<ExternalKVLoad> take_external_loads();
  [[nodiscard]] HostKVTier* host_tier() const { return host_tier_; }
  [[nodiscard]] int64_t queries_tokens() const { return stats_.queries_tokens; }
  [[nodiscard]] int64_t hits_tokens() const { return stats_.hits_tokens; }
  /// Forgets every cached block; false (nothing changed) while any request holds blocks.
  [[nodiscard]] bool reset_prefix_cache() { return pool_.reset_prefix_cache(); }

  [[nodiscard]] const KVCacheConfig& config() const { return config_; }
  [[nodiscard]] int block_size() const { return config_.block_size; }
  [[nodiscard]] bool prefix_caching_enabled() const { return config_.enable_prefix_caching; }
  [[nodiscard]] const BlockPool& block_pool() const { return pool_; }

 private:
  // One request's blocks. block_hashes[i] is the hash of block_ids[i] for the leading blocks that
  // have been full and offered to the cache (prefix caching only); it never outruns block_ids.
  struct RequestBlocks {
    std::vector<BlockId> block_ids;
    std::vector<BlockHash> block_hashes;
  };

  // The hash of logical block `index` of `request`, chained on `parent`.
  [[nodiscard]] BlockHash hash_block(const KVRequestView& request, int64_t index,
                                     const std::optional<BlockHash>& parent) const;
  // Hashes and caches the request's blocks that are full within its first `num_tokens` tokens.
  void cache_full_blocks(RequestBlocks& state, const KVRequestView& request, int64_t num_tokens);

  KVCacheConfig config_;
  BlockPool pool_;
  HostKVTier* host_tier_;  // may be null
  std::unordered_map<RequestId, RequestBlocks> requests_;
  PrefixCacheStats stats_;
  PrefixCacheStats host_stats_;
  int64_t imported_hits_tokens_ = 0;
  // Blocks import_blocks() placed, with the hash they were placed under: a hit on block b is on
  // imported KV while b is still cached under that hash (a reused block has another).
  std::unordered_map<BlockId, BlockHash> imported_;
  // Imported blocks uncached because their bytes were never written: their evictions are not
  // saved to the host tier (until the next take_host_saves).
  std::unordered_map<BlockId, BlockHash> unwritten_;
  std::vector<HostKVCopy> pending_loads_;         // host hits allocated since take_host_loads()
  std::vector<ExternalKVLoad> pending_external_;  // external blocks since take_external_loads()
  bool windows_ = false;                          // begin_window() was called: track pending blocks
  std::unordered_set<BlockId> pending_;           // blocks first cached in the current window
};

}  // namespace pagoda::kv
