#pragma once
// The host-memory KV tier (`--kv-offloading-size`): a second, larger prefix cache in host memory
// behind the device's BlockPool, keyed by the same chained block hashes.
//
// How it works. The tier is a fixed arena of capacity_blocks slots of block_bytes each (one KV
// block's K and V in every layer, KVCacheSpec::block_bytes) and an LRU list of the hashes stored
// in them. A block the device pool evicts (reuses) is stored here just before the step that
// overwrites it (KVCacheManager::take_host_saves); when the tier is full the least recently used
// hash gives up its slot. A prefix lookup continues the device's hash chain here where the device
// hits stop (KVCacheManager::get_computed_blocks): a chain of hashes found here is loaded back into
// fresh device blocks before the step that needs them, and those tokens count as computed.
// Entries are immutable: a hash names its block's content (the whole prefix), so storing a hash
// already present only refreshes its LRU position. Single-threaded: the engine thread owns it.
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace pagoda::kv {

class HostKVTier {
 public:
  /// capacity_blocks >= 1 slots of block_bytes >= 1 bytes each. The arena is allocated here but
  /// left untouched, so the OS backs only the slots written. InvalidArgument when it cannot be
  /// allocated.
  HostKVTier(int64_t capacity_blocks, int64_t block_bytes);
  HostKVTier(const HostKVTier&) = delete;
  HostKVTier& operator=(const HostKVTier&) = delete;

  /// Whether a block with this hash is stored (its LRU position unchanged).
  [[nodiscard]] bool contains(const BlockHash& hash) const { return entries_.contains(hash); }

  /// The stored bytes of `hash` ([block_bytes]), now the most recently used; empty when absent.
  /// Valid until the next store().
  [[nodiscard]] std::span<const std::byte> lookup(const BlockHash& hash);

  /// Stores a block's bytes ([block_bytes]) under `hash`, evicting the least recently used entry
  /// when full. A hash already stored is only made the most recently used (same hash, same
  /// content). Returns whether bytes were copied.
  bool store(const BlockHash& hash, std::span<const std::byte> bytes);

  /// Marks a stored hash as the most recently used; false when absent.
  bool touch(const BlockHash& hash);

  [[nodiscard]] int64_t capacity_blocks() const { return capacity_blocks_; }
  [[nodiscard]] int64_t block_bytes() const { return block_bytes_; }
  [[nodiscard]] int64_t num_blocks() const { return static_cast<int64_t>(entries_.size()); }
  /// Fraction of the slots in use, in [0, 1].
  [[nodiscard]] double usage() const {
    return static_cast<double>(num_blocks()) / static_cast<double>(capacity_blocks_);
  }
  /// Entries evicted for room since construction.
  [[nodiscard]] int64_t num_evictions() const { return num_evictions_; }
  /// Stored hashes from the least to the most recently used, for tests (O(n)).
  [[nodiscard]] std::vector<BlockHash> lru_order() const { return {lru_.begin(), lru_.end()}; }

 private:
  struct Entry {
    int64_t slot = 0;                       // index into the arena
    std::list<BlockHash>::iterator lru_it;  // its place in lru_
  };

  // Bytes of slot s: arena_[s * block_bytes_, (s + 1) * block_bytes_). Example: block_bytes
  // 4096, slot 3 -> bytes [12288, 16384).
  [[nodiscard]] std::byte* slot_data(int64_t slot) const {
    return arena_.get() + slot * block_bytes_;
  }

  int64_t capacity_blocks_;
  int64_t block_bytes_;
  std::unique_ptr<std::byte[]> arena_;  // [capacity_blocks, block_bytes], uninitialized
  std::vector<int64_t> free_slots_;     // slots holding no entry, taken from the back
  std::list<BlockHash> lru_;            // least recently used first
  std::unordered_map<BlockHash, Entry> entries_;
  int64_t num_evictions_ = 0;
};

}  // namespace pagoda::kv
