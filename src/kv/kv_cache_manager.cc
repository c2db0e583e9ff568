#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <unordered_map>

#include "core/status.h"

namespace pagoda::kv {

namespace {

const KVCacheConfig& validated(const KVCacheConfig& config) {
  config.validate();
  return config;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

KVCacheManager::KVCacheManager(const KVCacheConfig& config, HostKVTier* host_tier)
    : config_(validated(config)),
      pool_(config.num_blocks, config.enable_prefix_caching),
      host_tier_(host_tier) {
  if (host_tier_ != nullptr && !config_.enable_prefix_caching) {
    throw InvalidArgument(
        "a host KV tier (--kv-offloading-size) needs prefix caching; drop "
        "--no-enable-prefix-caching or set --kv-offloading-size 0");
  }
  // The pool's evictions are what the host tier saves (take_host_saves).
  if (host_tier_ != nullptr) pool_.set_record_events(true);
}

BlockHash KVCacheManager::hash_block(const KVRequestView& request, int64_t index,
                                     const std::optional<BlockHash>& parent) const {
  const int64_t block_size = config_.block_size;
  // The salt enters the first block only: chaining carries it into every later block's hash.
  const std::string_view extra_keys = index == 0 ? request.cache_salt : std::string_view{};
  return hash_block_tokens(parent, request.token_ids.subspan(index * block_size, block_size),
                           extra_keys);
}

ComputedBlocks KVCacheManager::get_computed_blocks(const KVRequestView& request) {
  ComputedBlocks result;
  const int64_t max_external =
      std::min<int64_t>(request.num_external_blocks,
                        std::max<int64_t>(static_cast<int64_t>(request.token_ids.size()) - 1, 0) /
                            config_.block_size);
  if (!config_.enable_prefix_caching) {
    // Received blocks need no cache: they are this request's own.
    result.num_external_blocks = static_cast<int>(max_external);
    result.num_computed_tokens = result.num_external_blocks * config_.block_size;
    return result;
  }
  const auto it = requests_.find(request.request_id);
  PAGODA_CHECK(it == requests_.end() || it->second.block_ids.empty(),
               "request {} already holds {} blocks; prefix lookups are for requests without any",
               request.request_id, it->second.block_ids.size());

  // Why stop at the first miss: a block's hash covers its whole prefix, so nothing after a miss
  // can hit. Why cap at num_tokens - 1: the last token must be computed to get its logits.
  const int64_t num_tokens = static_cast<int64_t>(request.token_ids.size());
  const int64_t max_hit_blocks = std::max<int64_t>(num_tokens - 1, 0) / config_.block_size;
  // The chain runs on the device while its blocks are cached there, then in the host tier.
  std::optional<BlockHash> parent;
  for (int64_t i = 0; i < max_hit_blocks; ++i) {
    const BlockHash hash = hash_block(request, i, parent);
    parent = hash;
    if (result.host_block_hashes.empty()) {
      if (const std::optional<BlockId> hit = pool_.get_cached_block(hash)) {
        if (pending_.contains(*hit)) break;  // this window's step fills it: not written yet
        if (const auto imported = imported_.find(*hit);
            imported != imported_.end() && imported->second == hash) {
          imported_hits_tokens_ += config_.block_size;
        }
        result.block_ids.push_back(*hit);
        result.block_hashes.push_back(hash);
        continue;
      }
    }
    if (max_external > 0) break;  // the received blocks continue the chain
    if (host_tier_ == nullptr || !host_tier_->contains(hash)) break;
    result.host_block_hashes.push_back(hash);
  }
  const int device_tokens = static_cast<int>(result.block_ids.size()) * config_.block_size;
  const int host_tokens = static_cast<int>(result.host_block_hashes.size()) * config_.block_size;
  // Example: 4 received blocks, the device holds blocks 0-1: logical blocks 2-3 are loaded.
  if (max_external > 0) {
    result.num_external_blocks =
        static_cast<int>(std::max<int64_t>(max_external - int64_t(result.block_ids.size()), 0));
  }
  result.num_computed_tokens =
      device_tokens + host_tokens + result.num_external_blocks * config_.block_size;
  stats_.queries_tokens += num_tokens;
  stats_.hits_tokens += device_tokens;
  if (host_tier_ != nullptr) {
    host_stats_.queries_tokens += num_tokens;
    host_stats_.hits_tokens += host_tokens;
  }
  return result;
}

std::optional<std::vector<BlockId>> KVCacheManager::allocate_slots(
    const KVRequestView& request, int num_new_tokens, const ComputedBlocks& new_computed_blocks,
    int num_lookahead_tokens) {
  PAGODA_CHECK(num_new_tokens >= 0 && num_lookahead_tokens >= 0 && request.num_computed_tokens >= 0,
               "request {}: num_new_tokens={} num_lookahead_tokens={} num_computed_tokens={}",
               request.request_id, num_new_tokens, num_lookahead_tokens,
               request.num_computed_tokens);
  const auto it = requests_.find(request.request_id);
  const size_t num_held = it == requests_.end() ? 0 : it->second.block_ids.size();
  const std::vector<BlockId>& hits = new_computed_blocks.block_ids;
  const std::vector<BlockHash>& host_hits = new_computed_blocks.host_block_hashes;
  const int num_external = new_computed_blocks.num_external_blocks;
  if (!new_computed_blocks.empty()) {
    PAGODA_CHECK(config_.enable_prefix_caching || (hits.empty() && host_hits.empty()),
                 "prefix hits with prefix caching off");
    PAGODA_CHECK(host_hits.empty() || num_external == 0,
                 "request {}: host hits and received blocks together", request.request_id);
    PAGODA_CHECK(num_held == 0 && request.num_computed_tokens == 0,
                 "request {} holds {} blocks and {} computed tokens; a prefix hit must come first",
                 request.request_id, num_held, request.num_computed_tokens);
    PAGODA_CHECK(new_computed_blocks.block_hashes.size() == hits.size() &&
                     new_computed_blocks.num_computed_tokens ==
                         static_cast<int64_t>(hits.size() + host_hits.size() + num_external) *
                             config_.block_size,
                 "malformed ComputedBlocks for request {}", request.request_id);
    for (const BlockHash& hash : host_hits) {
      PAGODA_CHECK(host_tier_ != nullptr && host_tier_->contains(hash),
                   "request {}: host block {} left the host tier since get_computed_blocks",
                   request.request_id, hash.to_string());
    }
    for (size_t i = 0; i < hits.size(); ++i) {
      const std::optional<BlockHash>& hash = pool_.block(hits[i]).block_hash;
      PAGODA_CHECK(hash && *hash == new_computed_blocks.block_hashes[i],
                   "request {}: computed block {} was evicted since get_computed_blocks",
                   request.request_id, hits[i]);
    }
  }

  // Why count free hit blocks: touching them pulls them out of the free queue, so they compete
  // with the new blocks for the same free slots. Checking everything before changing anything
  // is what makes a failed allocation leave no trace.
  const int64_t num_computed =
      int64_t{request.num_computed_tokens} + new_computed_blocks.num_computed_tokens;
  const int64_t num_required_blocks =
      ceil_div(num_computed + num_new_tokens + num_lookahead_tokens, config_.block_size);
  const int64_t num_new_blocks =
      std::max<int64_t>(num_required_blocks - static_cast<int64_t>(num_held + hits.size()), 0);
  const int64_t num_free_hits = std::count_if(
      hits.begin(), hits.end(), [&](BlockId id) { return pool_.block(id).ref_count == 0; });
  if (num_new_blocks + num_free_hits > pool_.num_free_blocks()) return std::nullopt;

  RequestBlocks& state = it == requests_.end() ? requests_[request.request_id] : it->second;
  pool_.touch(hits);
  state.block_ids.insert(state.block_ids.end(), hits.begin(), hits.end());
  state.block_hashes.insert(state.block_hashes.end(), new_computed_blocks.block_hashes.begin(),
                            new_computed_blocks.block_hashes.end());
  std::vector<BlockId> new_blocks = pool_.get_new_blocks(static_cast<int>(num_new_blocks));
  state.block_ids.insert(state.block_ids.end(), new_blocks.begin(), new_blocks.end());
  // The host hits are the first new blocks: logical blocks hits.size() + j.
  PAGODA_CHECK(new_blocks.size() >= host_hits.size(), "request {}: {} new blocks for {} host hits",
               request.request_id, new_blocks.size(), host_hits.size());
  for (size_t j = 0; j < host_hits.size(); ++j)
    pending_loads_.push_back({new_blocks[j], host_hits[j]});
  // The received blocks are the first new blocks too (never with host hits): logical blocks
  // hits.size() + j. Example: 1 device hit, 3 received: logical 1, 2, 3 <- new_blocks[0..2].
  PAGODA_CHECK(new_blocks.size() >= static_cast<size_t>(num_external),
               "request {}: {} new blocks for {} received blocks", request.request_id,
               new_blocks.size(), num_external);
  for (int j = 0; j < num_external; ++j) {
    pending_external_.push_back(
        {request.request_id, static_cast<int>(hits.size()) + j, new_blocks[j]});
  }

  // Blocks this step fills are cached now, before the step runs (as vLLM does): a request that
  // hits them is in the same or a later step, and the step writes KV before attention reads it.
  // Host hits are cached here too, under the hashes they were found by: their bytes are loaded
  // before the step runs.
  if (config_.enable_prefix_caching) {
    const int64_t num_known_tokens = static_cast<int64_t>(request.token_ids.size());
    cache_full_blocks(state, request, std::min(num_computed + num_new_tokens, num_known_tokens));
  }
  for (size_t j = 0; j < host_hits.size(); ++j) {
    PAGODA_CHECK(pool_.block(new_blocks[j]).block_hash == host_hits[j],
                 "request {}: host hit block {} is not cached under its hash", request.request_id,
                 new_blocks[j]);
  }
  return new_blocks;
}

void KVCacheManager::cache_full_blocks(RequestBlocks& state, const KVRequestView& request,
                                       int64_t num_tokens) {
  const size_t num_full =
      std::min(static_cast<size_t>(num_tokens / config_.block_size), state.block_ids.size());
  const size_t first = state.block_hashes.size();
  if (num_full <= first) return;
  for (size_t i = first; i < num_full; ++i) {
    const std::optional<BlockHash> parent =
        i == 0 ? std::nullopt : std::optional<BlockHash>(state.block_hashes[i - 1]);
    state.block_hashes.push_back(hash_block(request, static_cast<int64_t>(i), parent));
  }
  pool_.cache_full_blocks(std::span(state.block_ids).subspan(first, num_full - first),
                          std::span(state.block_hashes).subspan(first, num_full - first));
  if (!windows_) return;
  for (size_t i = first; i < num_full; ++i) {  // those that entered the cache (not duplicates)
    if (pool_.get_cached_block(state.block_hashes[i]) == state.block_ids[i])
      pending_.insert(state.block_ids[i]);
  }
}

void KVCacheManager::begin_window() {
  windows_ = true;
  pending_.clear();
}

void KVCacheManager::free(RequestId request_id, bool drop_pending) {
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  const std::vector<BlockId> reversed(it->second.block_ids.rbegin(), it->second.block_ids.rend());
  requests_.erase(it);
  if (drop_pending) {
    for (const BlockId id : reversed) {
      if (pending_.contains(id) && pool_.block(id).ref_count == 1) {
        pool_.uncache(id);
        pending_.erase(id);
      }
    }
  }
  pool_.free_blocks(reversed);
}

std::optional<ForkResult> KVCacheManager::fork(RequestId parent_id, RequestId child_id,
                                               int num_computed_tokens) {
  const auto parent_it = requests_.find(parent_id);
  PAGODA_CHECK(parent_it != requests_.end(), "fork of unknown request {}", parent_id);
  PAGODA_CHECK(!requests_.contains(child_id), "fork into existing request {}", child_id);
  const RequestBlocks& parent = parent_it->second;
  const int64_t block_size = config_.block_size;
  PAGODA_CHECK(
      num_computed_tokens >= 0 &&
          num_computed_tokens <= static_cast<int64_t>(parent.block_ids.size()) * block_size,
      "request {} holds {} blocks, cannot fork at token {}", parent_id, parent.block_ids.size(),
      num_computed_tokens);

  const size_t num_full = static_cast<size_t>(num_computed_tokens / block_size);
  const bool has_partial = num_computed_tokens % block_size != 0;
  if (has_partial && pool_.num_free_blocks() < 1) return std::nullopt;

  RequestBlocks child;
  child.block_ids.assign(parent.block_ids.begin(), parent.block_ids.begin() + num_full);
  child.block_hashes.assign(
      parent.block_hashes.begin(),
      parent.block_hashes.begin() + std::min(num_full, parent.block_hashes.size()));
  ForkResult result;
  pool_.touch(child.block_ids);
  if (has_partial) {
    const BlockId copy = pool_.get_new_blocks(1).front();
    child.block_ids.push_back(copy);
    result.copy_on_write = BlockCopy{parent.block_ids[num_full], copy};
  }
  requests_.emplace(child_id, std::move(child));
  return result;
}

// Which evicted blocks still hold their KV, how it works: a block enters the cache (kStored) when
// allocate_slots gives it to the step that will write it, before that step runs; it is evicted
// (kEvicted) when get_new_blocks reuses it, and keeps its bytes until a later step overwrites
// them. This is called once per launched step, between schedule() and the launch, so every step
// launched before has completed: a block stored in an earlier call's window was written, and one
// stored in this window was not. An eviction is saved unless its block was stored in this same
// window under the same hash (cached, then freed and reused before its step ever ran).
// Example: window events [stored b5:h1, evicted b2:h0, evicted b5:h1] -> save b2:h0 only.
std::vector<HostKVCopy> KVCacheManager::take_host_saves() {
  std::vector<HostKVCopy> saves;
  if (host_tier_ == nullptr) return saves;
  std::unordered_map<BlockId, BlockHash> stored_now;
  for (const KVCacheEvent& e : pool_.take_events()) {
    if (e.kind == KVCacheEvent::Kind::kStored) {
      stored_now.insert_or_assign(e.block_id, e.hash);
      continue;
    }
    const auto it = stored_now.find(e.block_id);
    if (it != stored_now.end() && it->second == e.hash) {
      stored_now.erase(it);  // its step never ran: nothing to save
      continue;
    }
    if (const auto u = unwritten_.find(e.block_id); u != unwritten_.end() && u->second == e.hash)
      continue;                               // an import whose bytes were never written
    if (host_tier_->touch(e.hash)) continue;  // the tier has this content already
    saves.push_back({e.block_id, e.hash});
  }
  unwritten_.clear();
  return saves;
}

ImportedBlocks KVCacheManager::import_blocks(std::span<const TokenId> token_ids,
                                             std::string_view cache_salt) {
  ImportedBlocks result;
  if (!config_.enable_prefix_caching) return result;
  const int64_t num_blocks = static_cast<int64_t>(token_ids.size()) / config_.block_size;
  const KVRequestView view{0, token_ids, 0, cache_salt};
  std::vector<BlockId> chain;  // the chain's blocks so far, each holding one reference
  std::optional<BlockHash> parent;
  for (int64_t i = 0; i < num_blocks; ++i) {
    const BlockHash hash = hash_block(view, i, parent);
    parent = hash;
    if (const std::optional<BlockId> hit = pool_.get_cached_block(hash)) {
      pool_.touch(std::span<const BlockId>(&*hit, 1));
      chain.push_back(*hit);
      ++result.num_cached;
      continue;
    }
    if (pool_.num_free_blocks() < 1) break;
    const BlockId block = pool_.get_new_blocks(1).front();
    pool_.cache_full_blocks(std::span<const BlockId>(&block, 1),
                            std::span<const BlockHash>(&hash, 1));
    chain.push_back(block);
    result.placed.push_back({static_cast<int>(i), block});
    imported_.insert_or_assign(block, hash);
  }
  // Tail first, as free() does: the chain's head, the most shareable part, is evicted last.
  const std::vector<BlockId> reversed(chain.rbegin(), chain.rend());
  pool_.free_blocks(reversed);
  return result;
}

void KVCacheManager::uncache_imported(std::span<const ImportedBlock> blocks) {
  for (const ImportedBlock& b : blocks) {
    const auto it = imported_.find(b.block);
    if (it == imported_.end()) continue;
    if (pool_.block(b.block).block_hash == it->second) {
      pool_.uncache(b.block);
      // take_host_saves must not save it.
      if (host_tier_ != nullptr) unwritten_.insert_or_assign(b.block, it->second);
    }
    imported_.erase(it);
  }
}

std::vector<HostKVCopy> KVCacheManager::take_host_loads() {
  std::vector<HostKVCopy> loads;
  loads.reserve(pending_loads_.size());
  for (const HostKVCopy& load : pending_loads_) {
    // Evicted again since (its request preempted and the block reused): nobody reads it now.
    if (pool_.block(load.block).block_hash == load.hash) loads.push_back(load);
  }
  pending_loads_.clear();
  return loads;
}

std::span<const BlockId> KVCacheManager::block_table(RequestId request_id) const {
  const auto it = requests_.find(request_id);
  PAGODA_CHECK(it != requests_.end(), "no blocks for request {}", request_id);
  return it->second.block_ids;
}

bool KVCacheManager::has_request(RequestId request_id) const {
  return requests_.contains(request_id);
}

std::vector<ExternalKVLoad> KVCacheManager::take_external_loads() {
  std::vector<ExternalKVLoad> loads;
  loads.reserve(pending_external_.size());
  for (const ExternalKVLoad& load : pending_external_) {
    // Preempted or aborted since: the block is no longer this request's, nobody reads the bytes.
    const auto it = requests_.find(load.request_id);
    if (it == requests_.end()) continue;
    const std::vector<BlockId>& ids = it->second.block_ids;
    if (static_cast<size_t>(load.index) < ids.size() && ids[load.index] == load.block)
      loads.push_back(load);
  }
  pending_external_.clear();
  return loads;
}

}  // namespace pagoda::kv
