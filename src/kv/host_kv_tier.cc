#include "kv/host_kv_tier.h"

#include <cstring>
#include <new>

#include "core/status.h"

namespace pagoda::kv {

HostKVTier::HostKVTier(int64_t capacity_blocks, int64_t block_bytes)
    : capacity_blocks_(capacity_blocks), block_bytes_(block_bytes) {
  if (capacity_blocks < 1 || block_bytes < 1) {
    throw InvalidArgument(fmt::format("host KV tier: {} blocks of {} bytes; both must be >= 1",
                                      capacity_blocks, block_bytes));
  }
  if (capacity_blocks > INT64_MAX / block_bytes) {
    throw InvalidArgument(
        fmt::format("host KV tier: {} blocks of {} bytes overflow", capacity_blocks, block_bytes));
  }
  try {
    // for_overwrite: no zeroing, so the pages stay unbacked until a slot is written.
    arena_ = std::make_unique_for_overwrite<std::byte[]>(
        static_cast<size_t>(capacity_blocks * block_bytes));
  } catch (const std::bad_alloc&) {
    throw InvalidArgument(fmt::format("host KV tier: cannot allocate {} blocks of {} bytes",
                                      capacity_blocks, block_bytes));
  }
  free_slots_.reserve(static_cast<size_t>(capacity_blocks));
  // Slot 0 is taken first: the slots fill the arena from its start.
  for (int64_t s = capacity_blocks - 1; s >= 0; --s) free_slots_.push_back(s);
  entries_.reserve(static_cast<size_t>(capacity_blocks));
}

std::span<const std::byte> HostKVTier::lookup(const BlockHash& hash) {
  const auto it = entries_.find(hash);
  if (it == entries_.end()) return {};
  lru_.splice(lru_.end(), lru_, it->second.lru_it);
  return {slot_data(it->second.slot), static_cast<size_t>(block_bytes_)};
}

bool HostKVTier::touch(const BlockHash& hash) {
  const auto it = entries_.find(hash);
  if (it == entries_.end()) return false;
  lru_.splice(lru_.end(), lru_, it->second.lru_it);
  return true;
}

bool HostKVTier::store(const BlockHash& hash, std::span<const std::byte> bytes) {
  PAGODA_CHECK(static_cast<int64_t>(bytes.size()) == block_bytes_,
               "host KV tier: a block of {} bytes, expected {}", bytes.size(), block_bytes_);
  if (touch(hash)) return false;
  if (free_slots_.empty()) {
    const auto victim = entries_.find(lru_.front());
    PAGODA_CHECK(victim != entries_.end(), "host KV tier: LRU head not stored");
    free_slots_.push_back(victim->second.slot);
    entries_.erase(victim);
    lru_.pop_front();
    ++num_evictions_;
  }
  const int64_t slot = free_slots_.back();
  free_slots_.pop_back();
  std::memcpy(slot_data(slot), bytes.data(), bytes.size());
  lru_.push_back(hash);
  entries_.emplace(hash, Entry{slot, std::prev(lru_.end())});
  return true;
}

}  // namespace pagoda::kv
