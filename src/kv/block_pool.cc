#include "kv/block_pool.h"

#include "core/status.h"

namespace pagoda::kv {

// ---- FreeBlockQueue ----

void FreeBlockQueue::push_back(BlockId id) {
  KVCacheBlock& block = blocks_[id];
  PAGODA_CHECK(!block.in_free_queue, "block {} is already in the free queue", id);
  block.prev_free = tail_;
  block.next_free = KVCacheBlock::kNoBlock;
  if (tail_ != KVCacheBlock::kNoBlock) {
    blocks_[tail_].next_free = id;
  } else {
    head_ = id;
  }
  tail_ = id;
  block.in_free_queue = true;
  ++size_;
}

BlockId FreeBlockQueue::pop_front() {
  PAGODA_CHECK(head_ != KVCacheBlock::kNoBlock, "pop from an empty free queue");
  const BlockId id = head_;
  remove(id);
  return id;
}

void FreeBlockQueue::remove(BlockId id) {
  KVCacheBlock& block = blocks_[id];
  PAGODA_CHECK(block.in_free_queue, "block {} is not in the free queue", id);
  if (block.prev_free != KVCacheBlock::kNoBlock) {
    blocks_[block.prev_free].next_free = block.next_free;
  } else {
    head_ = block.next_free;
  }
  if (block.next_free != KVCacheBlock::kNoBlock) {
    blocks_[block.next_free].prev_free = block.prev_free;
  } else {
    tail_ = block.prev_free;
  }
  block.prev_free = KVCacheBlock::kNoBlock;
  block.next_free = KVCacheBlock::kNoBlock;
  block.in_free_queue = false;
  --size_;
}

std::vector<BlockId> FreeBlockQueue::to_vector() const {
  std::vector<BlockId> ids;
  ids.reserve(size_);
  for (BlockId id = head_; id != KVCacheBlock::kNoBlock; id = blocks_[id].next_free) {
    ids.push_back(id);
  }
  return ids;
}

// ---- BlockPool ----

BlockPool::BlockPool(int num_blocks, bool enable_caching)
    : enable_caching_(enable_caching),
      blocks_(num_blocks > 0 ? num_blocks : 0),
      free_queue_(blocks_) {
  PAGODA_CHECK(num_blocks >= 2, "a pool needs the null block and one usable block, got {}",
               num_blocks);
  for (int i = 0; i < num_blocks; ++i) blocks_[i].block_id = i;
  cached_.reserve(num_blocks);  // at most one entry per block: never rehashes
  // Block 0 is the null block: never queued, so it is never handed out.
  for (int i = 1; i < num_blocks; ++i) free_queue_.push_back(i);
}

KVCacheBlock& BlockPool::mutable_block(BlockId id) {
  PAGODA_CHECK(id >= 0 && id < num_blocks(), "block id {} out of range [0, {})", id, num_blocks());
  return blocks_[id];
}

const KVCacheBlock& BlockPool::block(BlockId id) const {
  PAGODA_CHECK(id >= 0 && id < num_blocks(), "block id {} out of range [0, {})", id, num_blocks());
  return blocks_[id];
}

void BlockPool::evict_cached_hash(KVCacheBlock& block) {
  if (!block.block_hash) return;
  const auto it = cached_.find(*block.block_hash);
  PAGODA_CHECK(it != cached_.end() && it->second == block.block_id,
               "block {} carries hash {} that the cache does not map to it", block.block_id,
               block.block_hash->to_string());
  cached_.erase(it);
  if (record_events_)
    events_.push_back({KVCacheEvent::Kind::kEvicted, *block.block_hash, block.block_id});
  block.block_hash.reset();
}

void BlockPool::uncache(BlockId id) { evict_cached_hash(mutable_block(id)); }

std::vector<BlockId> BlockPool::get_new_blocks(int n) {
  PAGODA_CHECK(n >= 0 && n <= num_free_blocks(), "asked for {} blocks, {} free", n,
               num_free_blocks());
  std::vector<BlockId> ids;
  ids.reserve(n);
  for (int i = 0; i < n; ++i) {
    KVCacheBlock& block = blocks_[free_queue_.pop_front()];
    PAGODA_CHECK(block.ref_count == 0, "free block {} has ref_count {}", block.block_id,
                 block.ref_count);
    // Lazy eviction: a cached block keeps its hash while free and loses it only now, on reuse.
    evict_cached_hash(block);
    block.ref_count = 1;
    ids.push_back(block.block_id);
  }
  return ids;
}

void BlockPool::touch(std::span<const BlockId> block_ids) {
  for (const BlockId id : block_ids) {
    KVCacheBlock& block = mutable_block(id);
    PAGODA_CHECK(id != kNullBlockId, "touching the null block");
    if (block.ref_count == 0) free_queue_.remove(id);
    ++block.ref_count;
  }
}

void BlockPool::free_blocks(std::span<const BlockId> block_ids) {
  for (const BlockId id : block_ids) {
    KVCacheBlock& block = mutable_block(id);
    PAGODA_CHECK(id != kNullBlockId, "freeing the null block");
    PAGODA_CHECK(block.ref_count > 0, "freeing block {} whose ref_count is {}", id,
                 block.ref_count);
    if (--block.ref_count == 0) free_queue_.push_back(id);
  }
}

void BlockPool::cache_full_blocks(std::span<const BlockId> block_ids,
                                  std::span<const BlockHash> hashes) {
  PAGODA_CHECK(block_ids.size() == hashes.size(), "{} blocks but {} hashes", block_ids.size(),
               hashes.size());
  if (!enable_caching_) return;
  for (size_t i = 0; i < block_ids.size(); ++i) {
    KVCacheBlock& block = mutable_block(block_ids[i]);
    PAGODA_CHECK(block.ref_count > 0, "caching block {} that no request holds", block.block_id);
    if (block.block_hash) {
      PAGODA_CHECK(*block.block_hash == hashes[i], "block {} is cached as {}, not {}",
                   block.block_id, block.block_hash->to_string(), hashes[i].to_string());
      continue;
    }
    // Two requests may fill blocks with the same content at once; the first stays the cached one.
    if (cached_.try_emplace(hashes[i], block.block_id).second) {
      block.block_hash = hashes[i];
      if (record_events_)
        events_.push_back({KVCacheEvent::Kind::kStored, hashes[i], block.block_id});
    }
  }
}

std::optional<BlockId> BlockPool::get_cached_block(const BlockHash& hash) const {
  const auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

bool BlockPool::reset_prefix_cache() {
  if (num_free_blocks() != num_blocks() - 1) return false;
  for (KVCacheBlock& block : blocks_) {
    if (block.block_hash && record_events_)
      events_.push_back({KVCacheEvent::Kind::kEvicted, *block.block_hash, block.block_id});
    block.block_hash.reset();
  }
  cached_.clear();
  return true;
}

std::vector<BlockId> BlockPool::evictable_cached_blocks() const {
  std::vector<BlockId> out;
  for (const BlockId id : free_queue_.to_vector()) {
    if (blocks_[static_cast<size_t>(id)].block_hash) out.push_back(id);
  }
  return out;
}

double BlockPool::usage() const {
  const int usable = num_blocks() - 1;
  return 1.0 - static_cast<double>(num_free_blocks()) / usable;
}

}  // namespace pagoda::kv
