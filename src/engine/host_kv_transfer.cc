#include "engine/host_kv_transfer.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda {

HostKVTransfer::HostKVTransfer(kv::HostKVTier& tier, kv::KVCacheManager& kv, Executor& executor)
    : tier_(tier), kv_(kv), executor_(executor) {
  PAGODA_CHECK(kv.host_tier() == &tier, "the KV cache manager has another host tier");
}

void HostKVTransfer::before_launch() {
  const std::vector<kv::HostKVCopy> saves = kv_.take_host_saves();
  const std::vector<kv::HostKVCopy> loads = kv_.take_host_loads();
  if (saves.empty() && loads.empty()) return;
  const auto block_bytes = static_cast<size_t>(tier_.block_bytes());

  // 1. Device -> staging. Block i of the batch is at [i * block_bytes, (i + 1) * block_bytes).
  save_ids_.clear();
  for (const kv::HostKVCopy& s : saves) save_ids_.push_back(s.block);
  save_bytes_.resize(saves.size() * block_bytes);
  executor_.save_kv_blocks(save_ids_, save_bytes_);

  // 2. Tier -> staging -> device, before step 3 can evict anything from the tier.
  load_ids_.clear();
  load_bytes_.resize(loads.size() * block_bytes);
  for (size_t i = 0; i < loads.size(); ++i) {
    const std::span<const std::byte> bytes = tier_.lookup(loads[i].hash);
    PAGODA_CHECK(bytes.size() == block_bytes, "host block {} left the tier before its load",
                 loads[i].hash.to_string());
    std::copy(bytes.begin(), bytes.end(),
              load_bytes_.begin() + static_cast<ptrdiff_t>(i * block_bytes));
    load_ids_.push_back(loads[i].block);
  }
  executor_.load_kv_blocks(load_ids_, load_bytes_);
  blocks_loaded_ += static_cast<int64_t>(loads.size());

  // 3. Staging -> tier.
  for (size_t i = 0; i < saves.size(); ++i) {
    const std::span<const std::byte> bytes(save_bytes_.data() + i * block_bytes, block_bytes);
    if (tier_.store(saves[i].hash, bytes)) ++blocks_saved_;
  }
}

}  // namespace pagoda
