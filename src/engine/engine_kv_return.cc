// Bi-directional KV (engine_impl.h): a finished turn's KV flows back to the engine that prefills
// the conversation's next turn, so that its prefill computes only the new tokens.
//
// How it works. On the engine that decodes (kv_both), a `return_kv` request that finishes keeps
// its full blocks: the prompt and generated tokens whose KV is computed, (tokens - 1) /
// block_size blocks (the last token's KV never is). finish() may run while a step is in flight,
// so keep_turn() only takes one more KV cache reference on them (KVCacheManager::fork under a
// holder id); a request that reaches max_tokens is freed by the scheduler when its last step
// completes, before its tokens are emitted, so pre_hold_turns() takes that reference there. At
// the next loop turn, with no step in flight, run_kv_returns() exports them to
// the KVExportStore (one executor copy, an XXH3 checksum per block), frees the holder, and only
// then pushes the request's final output with the hand-off, so a pull made as soon as the answer
// is read finds the entry. On the engine that prefills (kv_both), import_kv() pulls such a
// hand-off on the transport's thread as a consumer pulls a prompt; the arrived blocks wait for
// the next loop turn with no step in flight, where KVCacheManager::import_blocks places those the
// prefix cache lacks in free blocks, cached under the hashes a prompt of those tokens (and that
// cache salt) gets, the host tier saves what placing them evicted, and one executor copy writes
// their bytes. A later prompt continuing the turn hits them like any cached block. A failed pull
// imports nothing and a failed copy uncaches what it placed: the next turn then recomputes.
#include <algorithm>

#include "core/logging.h"
#include "core/status.h"
#include "engine/engine_impl.h"

namespace pagoda {

void EngineCore::import_kv(const KVTransferParams& params, std::string cache_salt,
                           std::function<void(KVImportResult)> done) {
  const KVConnector* connector = impl_->kv_connector.get();
  if (connector == nullptr || !connector->config().consumer()) {
    throw InvalidArgument(
        "kv_transfer_params: importing a finished turn's KV needs an engine started with "
        "--kv-transfer-config kv_role kv_both (or kv_consumer): it pulls the blocks");
  }
  if (!impl_->args.enable_prefix_caching) {
    throw InvalidArgument(
        "kv_transfer_params: importing KV needs prefix caching (drop "
        "--no-enable-prefix-caching): the imported blocks are found by their prefix hashes");
  }
  if (params.remote_host.empty() || params.remote_request_id.empty() || params.remote_port < 1 ||
      params.remote_port > 65535) {
    throw InvalidArgument(
        "kv_transfer_params: remote_host, remote_port (1..65535) and remote_request_id are "
        "required to import KV");
  }
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) throw Unavailable("the engine is shutting down");
    impl_->incoming_imports.push_back({params, std::move(cache_salt), std::move(done)});
  }
  impl_->wake.notify_all();
}

std::optional<EngineCore::Impl::HeldTurn> EngineCore::Impl::hold_blocks(
    kv::RequestId id, std::span<const int32_t> tokens,
    const std::shared_ptr<ActiveRequest>& request) {
  if (!kv_manager->has_request(id)) return std::nullopt;  // preempted: no blocks
  const int64_t bs = kv_manager->block_size();
  // All tokens but the last have their KV written by completed steps. Example (block_size 16):
  // a 40-token prompt and 9 generated tokens, 49 tokens: 48 have KV, 3 blocks are kept.
  const int64_t blocks = std::min((static_cast<int64_t>(tokens.size()) - 1) / bs,
                                  static_cast<int64_t>(kv_manager->block_table(id).size()));
  if (blocks <= 0) return std::nullopt;
  HeldTurn turn;
  turn.holder = next_kv_id++;
  // Whole blocks: no copy-on-write block is needed, so the fork cannot fail for room.
  if (!kv_manager->fork(id, turn.holder, static_cast<int>(blocks * bs))) return std::nullopt;
  turn.request = request;
  turn.tokens.assign(tokens.begin(), tokens.begin() + blocks * bs);
  return turn;
}

bool EngineCore::Impl::keep_turn(kv::RequestId id, const Completion& c, bool aborted) {
  if (const auto pre = pre_held.find(id); pre != pre_held.end()) {
    HeldTurn turn = std::move(pre->second);
    pre_held.erase(pre);
    if (aborted) {
      kv_manager->free(turn.holder);
      return false;
    }
    held_turns.push_back(std::move(turn));
    return true;
  }
  if (aborted) return false;
  const scheduler::Request* r = scheduler->get(id);
  if (r == nullptr) return false;
  // The emitted tokens (a stop string may end the turn before the last sampled token).
  const size_t emitted = c.request->prompt.size() + static_cast<size_t>(c.num_output_tokens);
  const std::span<const int32_t> all = r->all_token_ids();
  std::optional<HeldTurn> turn =
      hold_blocks(id, all.first(std::min(emitted, all.size())), c.request);
  if (!turn) return false;
  held_turns.push_back(std::move(*turn));
  return true;
}

void EngineCore::Impl::pre_hold_turns(
    const std::vector<std::pair<kv::RequestId, std::vector<int32_t>>>& new_tokens) {
  for (const auto& [id, sampled] : new_tokens) {
    const auto c = completions.find(id);
    if (c == completions.end() || !c->second.request->return_kv || pre_held.contains(id)) continue;
    const scheduler::Request* r = scheduler->get(id);
    if (r == nullptr) continue;
    // update_from_output keeps at most `room` of the sampled tokens and finishes the request
    // when they fill max_tokens.
    const int room = c->second.request->params.max_tokens - r->num_output_tokens();
    if (static_cast<int>(sampled.size()) < room) continue;
    std::vector<int32_t> tokens(r->all_token_ids().begin(), r->all_token_ids().end());
    tokens.insert(tokens.end(), sampled.begin(), sampled.begin() + std::max(room, 0));
    std::optional<HeldTurn> turn = hold_blocks(id, tokens, c->second.request);
    if (turn) pre_held.emplace(id, std::move(*turn));
  }
}

void EngineCore::Impl::start_import(KVImport import) {
  const kv::RequestId id = next_kv_id++;
  const KVTransferParams params = import.params;
  imports.emplace(id, std::move(import));
  kv_connector->start_pull(id, params);
}

bool EngineCore::Impl::take_import_arrival(KVConnector::Arrival& arrival) {
  const auto it = imports.find(arrival.id);
  if (it == imports.end()) return false;
  KVImport import = std::move(it->second);
  imports.erase(it);
  std::string why;
  std::shared_ptr<kv_transfer::ExportedKV> kv = kv_connector->accept_import(arrival, why);
  if (kv == nullptr) {
    spdlog::warn("KV import of {} from {}:{} failed (the next turn recomputes it): {}",
                 import.params.remote_request_id, import.params.remote_host,
                 import.params.remote_port, why);
    KVImportResult result;
    result.error = why;
    publish_stats();  // a caller that has the answer sees the failure counted
    import.done(std::move(result));
    return true;
  }
  arrived_imports.emplace_back(std::move(import), std::move(kv));
  return true;
}

void EngineCore::Impl::run_kv_returns() {
  std::vector<HeldTurn> turns;
  turns.swap(held_turns);
  for (HeldTurn& turn : turns) {
    try {
      const std::span<const kv::BlockId> blocks = kv_manager->block_table(turn.holder);
      turn.out.kv_transfer_params =
          kv_connector->export_blocks(turn.request->id, turn.tokens, blocks);
      kv_connector->count_returned(static_cast<int64_t>(blocks.size()));
    } catch (const std::exception& e) {
      // The answer itself is complete: it goes out without a hand-off.
      spdlog::error("request {}: keeping the finished turn's KV failed: {}", turn.request->id,
                    e.what());
    }
    kv_manager->free(turn.holder);
    close_request(turn.request, std::move(turn.out));
  }

  decltype(arrived_imports) arrived;
  arrived.swap(arrived_imports);
  std::vector<std::pair<std::function<void(KVImportResult)>, KVImportResult>> answers;
  const auto block_bytes =
      static_cast<size_t>(executor->info().kv_spec.block_bytes(kv_manager->block_size()));
  for (auto& [import, kv] : arrived) {
    KVImportResult result;
    result.num_blocks = kv->num_blocks();
    kv::ImportedBlocks imported = kv_manager->import_blocks(kv->token_ids, import.cache_salt);
    result.cached_blocks = imported.num_cached;
    try {
      // What placing them evicted goes to the host tier before their bytes are overwritten.
      if (host_transfer) host_transfer->before_launch();
      if (!imported.placed.empty()) {
        // Placed block j's bytes at [j * block_bytes, (j + 1) * block_bytes) of the staging.
        std::vector<std::byte> staging(imported.placed.size() * block_bytes);
        std::vector<int32_t> ids;
        for (size_t j = 0; j < imported.placed.size(); ++j) {
          const std::span<const std::byte> bytes = kv->block(imported.placed[j].index);
          std::copy(bytes.begin(), bytes.end(),
                    staging.begin() + static_cast<ptrdiff_t>(j * block_bytes));
          ids.push_back(imported.placed[j].block);
        }
        executor->load_kv_blocks(ids, staging);
      }
      result.imported_blocks = static_cast<int>(imported.placed.size());
      kv_connector->count_imported(result.imported_blocks);
    } catch (const std::exception& e) {
      kv_manager->uncache_imported(imported.placed);
      result.error = fmt::format("loading the imported blocks failed: {}", e.what());
      spdlog::error("KV import of {}: {}", import.params.remote_request_id, result.error);
    }
    answers.emplace_back(std::move(import.done), std::move(result));
  }
  if (arrived.empty()) return;
  publish_stats();  // a caller that has the answer sees the blocks counted
  for (auto& [done, result] : answers) done(std::move(result));
}

void EngineCore::Impl::release_kv_returns() {
  for (auto& [id, turn] : pre_held) kv_manager->free(turn.holder);
  pre_held.clear();
  for (HeldTurn& turn : held_turns) {
    kv_manager->free(turn.holder);
    close_request(turn.request, std::move(turn.out));
  }
  held_turns.clear();
  KVImportResult failed;
  failed.error = "the engine shut down";
  for (auto& [id, import] : imports) import.done(failed);
  imports.clear();
  for (auto& [import, kv] : arrived_imports) import.done(failed);
  arrived_imports.clear();
  std::deque<KVImport> queued;
  {
    std::lock_guard lock(mutex);
    queued.swap(incoming_imports);
  }
  for (KVImport& import : queued) import.done(failed);
}

}  // namespace pagoda
