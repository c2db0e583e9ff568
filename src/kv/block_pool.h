#pragma once
// The pool of physical KV blocks: reference counts, the free queue in eviction order, and the
// prefix cache's hash -> block map.
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_hash.h"
#include "kv/types.h"

namespace pagoda::kv {

/// One physical KV block's bookkeeping (the KV data itself lives on the device, indexed by id).
struct KVCacheBlock {
  BlockId block_id = kNullBlockId;
  /// How many block tables hold this block. 0: free (in the free queue, possibly still cached).
  int32_t ref_count = 0;
  /// Set while the block is in the prefix cache (full, and findable by this hash).
  std::optional<BlockHash> block_hash;
  /// Free-queue links; kNoBlock when not linked. Only FreeBlockQueue touches these.
  BlockId prev_free = kNoBlock;
  BlockId next_free = kNoBlock;
  bool in_free_queue = false;

  static constexpr BlockId kNoBlock = -1;
};

/// The free blocks in eviction order: an intrusive doubly-linked list threaded through the blocks.
///
/// Why intrusive: a prefix-cache hit on a free block must pull it out of the middle of the queue;
/// links stored in the block make that O(1) with no allocation, where a std::list would need a
/// side table of iterators and a std::deque an O(n) erase.
class FreeBlockQueue {
 public:
  /// `blocks` must outlive the queue and never move. Starts empty.
  explicit FreeBlockQueue(std::span<KVCacheBlock> blocks) : blocks_(blocks) {}

  void push_back(BlockId id);
  /// Removes and returns the head (the next block to evict). The queue must not be empty.
  [[nodiscard]] BlockId pop_front();
  /// Unlinks a block from anywhere in the queue. The block must be in the queue.
  void remove(BlockId id);

  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] bool empty() const { return size_ == 0; }
  /// Head to tail, for tests and debugging (O(n)).
  [[nodiscard]] std::vector<BlockId> to_vector() const;

 private:
  std::span<KVCacheBlock> blocks_;
  BlockId head_ = KVCacheBlock::kNoBlock;
  BlockId tail_ = KVCacheBlock::kNoBlock;
  int size_ = 0;
};

/// What happened to the prefix cache since the last BlockPool::take_events(), in order (vLLM's KV
/// events): a block entered the cache under a hash, or a cached block lost its hash (evicted for
/// reuse, or the cache was reset). A host KV tier copies a block out before it is evicted;
/// a cache-aware router mirrors which hashes an engine holds.
struct KVCacheEvent {
  enum class Kind : uint8_t { kStored, kEvicted };
  Kind kind;
  BlockHash hash;
  BlockId block_id;
};

/// Owns every KV block: hands out free ones (evicting LRU cached blocks lazily), reference-counts
/// shared ones and finds cached full blocks by hash. Deals in block ids only, never in KV data or
/// dtypes. Single-threaded: the engine thread owns it.
class BlockPool {
 public:
  /// `num_blocks` counts the null block, so num_blocks - 1 blocks are usable; it must be >= 2.
  BlockPool(int num_blocks, bool enable_caching);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  /// Pops `n` blocks off the free queue's head (ref_count 1 each), dropping any cached hash they
  /// held. The caller must have checked n <= num_free_blocks().
  [[nodiscard]] std::vector<BlockId> get_new_blocks(int n);

  /// Takes one more reference on each block (a prefix-cache hit or a fork); a free cached block
  /// leaves the free queue so it cannot be evicted.
  void touch(std::span<const BlockId> block_ids);

  /// Drops one reference on each block, in the given order; a block reaching 0 is appended to the
  /// free queue's tail, so blocks freed first are evicted first. Freeing a block whose ref_count is
  /// already 0, or the null block, is a bug (PAGODA_CHECK).
  void free_blocks(std::span<const BlockId> block_ids);

  /// Enters full blocks into the prefix cache: block_ids[i] gets hashes[i]. A hash already cached
  /// by another block keeps that block (the duplicate stays uncached); a block already cached must
  /// carry the same hash. No-op when caching is off.
  void cache_full_blocks(std::span<const BlockId> block_ids, std::span<const BlockHash> hashes);

  /// Drops the block's cached hash, if any (recorded as a kEvicted event), so that no lookup finds
  /// it again: for a block cached for a step that will not write it.
  void uncache(BlockId id);

  /// The cached block with this hash, if any (free or in use).
  [[nodiscard]] std::optional<BlockId> get_cached_block(const BlockHash& hash) const;

  /// Drops every cached hash. Only possible while no block is in use (returns false otherwise,
  /// changing nothing), since in-use blocks may be found again by running requests.
  [[nodiscard]] bool reset_prefix_cache();

  /// Free blocks, including cached ones that no request holds (they are evictable).
  [[nodiscard]] int num_free_blocks() const { return free_queue_.size(); }
  /// All blocks, the null block included.
  [[nodiscard]] int num_blocks() const { return static_cast<int>(blocks_.size()); }
  [[nodiscard]] int num_cached_blocks() const { return static_cast<int>(cached_.size()); }
  /// Fraction of usable blocks held by requests, in [0, 1].
  [[nodiscard]] double usage() const;
  [[nodiscard]] bool caching_enabled() const { return enable_caching_; }

  [[nodiscard]] const KVCacheBlock& block(BlockId id) const;
  /// Free block ids from the next to evict to the last, for tests and debugging (O(n)).
  [[nodiscard]] std::vector<BlockId> free_queue_order() const { return free_queue_.to_vector(); }

  /// Starts (or stops) recording KVCacheEvents; off by default, so that nobody pays for a log that
  /// nobody reads.
  void set_record_events(bool on) { record_events_ = on; }
  /// The events since the last call, oldest first.
  [[nodiscard]] std::vector<KVCacheEvent> take_events() { return std::exchange(events_, {}); }
  /// The cached free blocks from the next to evict on: what an offloading tier should save first
  /// (O(free blocks)).
  [[nodiscard]] std::vector<BlockId> evictable_cached_blocks() const;

 private:
  KVCacheBlock& mutable_block(BlockId id);
  void evict_cached_hash(KVCacheBlock& block);

  bool enable_caching_;
  std::vector<KVCacheBlock> blocks_;  // indexed by block id; never resized (the queue points in)
  FreeBlockQueue free_queue_;
  std::unordered_map<BlockHash, BlockId> cached_;
  bool record_events_ = false;
  std::vector<KVCacheEvent> events_;
};

}  // namespace pagoda::kv
