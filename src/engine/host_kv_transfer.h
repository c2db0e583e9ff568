#pragma once
// The engine's side of the host KV tier (`--kv-offloading-size`, kv/host_kv_tier.h): the copies
// between the device's KV cache and the tier around each step.
//
// How it works. The scheduler's allocations decide both directions: blocks the pool evicted for
// reuse (their KV still intact: no step has run since) must reach the tier before the step
// overwrites them, and host hits' fresh blocks must hold the tier's bytes before the step reads
// them. So, between schedule() and the launch of the step, with no step in flight:
//   1. save: the evicted blocks (KVCacheManager::take_host_saves) -> one executor call into a
//      staging buffer [saves, block_bytes];
//   2. load: the host hits' bytes (KVCacheManager::take_host_loads) gathered from the tier into a
//      staging buffer [loads, block_bytes] -> one executor call into their device blocks;
//   3. the saved bytes go into the tier (which may evict its least recently used entries).
// Loads read the tier before the saves go in, so a save can never evict a block about to be
// loaded, and a device block both saved and loaded (evicted, then given to a host hit) is read
// before it is written. Both copies are one batched executor call each (through the worker
// process's socket with `--distributed-executor-backend mp`); on the GPU they are synchronous
// today (Model::save_kv_blocks's default over export_kv_block / import_kv_block).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv/host_kv_tier.h"
#include "kv/kv_cache_manager.h"
#include "runtime/executor.h"

namespace pagoda {

class HostKVTransfer {
 public:
  /// All three must outlive this object; `kv` must have `tier` attached.
  HostKVTransfer(kv::HostKVTier& tier, kv::KVCacheManager& kv, Executor& executor);

  /// The saves and loads the scheduler's last schedule() made necessary; call it right before the
  /// step launches (and only then: the saves' rule counts on it). Throws what the executor throws.
  void before_launch();

  [[nodiscard]] int64_t blocks_saved() const { return blocks_saved_; }
  [[nodiscard]] int64_t blocks_loaded() const { return blocks_loaded_; }

 private:
  kv::HostKVTier& tier_;
  kv::KVCacheManager& kv_;
  Executor& executor_;
  // Reused between steps: [saves, block_bytes] and [loads, block_bytes]; their ids in order.
  std::vector<std::byte> save_bytes_, load_bytes_;
  std::vector<int32_t> save_ids_, load_ids_;
  int64_t blocks_saved_ = 0;
  int64_t blocks_loaded_ = 0;
};

}  // namespace pagoda
