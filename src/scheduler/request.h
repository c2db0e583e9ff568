#pragma once
// One generation request as the scheduler sees it: its tokens and the one counter that chases them.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/types.h"

namespace pagoda::scheduler {

/// Where a request is in its life. The kFinished* states are terminal.
enum class RequestStatus {
  kWaiting,    // admitted to the scheduler, never run
  kRunning,    // holds KV blocks and is scheduled step after step
  kPreempted,  // its blocks were freed; waits to recompute its prompt and output
  // Prefill/decode disaggregation's consumer: its prompt's KV is being received from a producer;
  // not scheduled, no blocks, until Scheduler::remote_kv_ready.
  kWaitingForRemoteKV,
  kFinishedStopped,
  kFinishedLength,
  kFinishedAborted,
};

[[nodiscard]] constexpr bool is_finished(RequestStatus status) {
  return status >= RequestStatus::kFinishedStopped;
}
[[nodiscard]] const char* to_string(RequestStatus status);

/// A request's token ids, its position in them (num_computed_tokens) and its scheduling keys.
///
/// The engine builds one, hands it to Scheduler::add_request and keeps its own per-request state
/// (sampling params, detokenizer, output channel) in its own map keyed by id(). Everything below
/// the constructor is the scheduler's to change; the engine only reads it, except for
/// set_spec_token_ids() between steps.
class Request {
 public:
  /// `max_tokens`: the most output tokens to generate. Lower `priority` runs first (priority
  /// policy only). `cache_salt`: requests with different salts never share KV blocks.
  Request(kv::RequestId id, std::vector<kv::TokenId> prompt_token_ids, int max_tokens,
          int priority = 0, std::string cache_salt = {});

  [[nodiscard]] kv::RequestId id() const { return id_; }
  [[nodiscard]] int priority() const { return priority_; }
  /// Assigned by the scheduler at add_request / fork_request: ties in priority go to the lower.
  [[nodiscard]] uint64_t arrival_order() const { return arrival_order_; }
  [[nodiscard]] int max_tokens() const { return max_tokens_; }
  [[nodiscard]] const std::string& cache_salt() const { return cache_salt_; }
  [[nodiscard]] RequestStatus status() const { return status_; }
  [[nodiscard]] bool is_finished() const { return scheduler::is_finished(status_); }

  /// Prompt then output: one contiguous vector, since kv::KVRequestView needs a span.
  [[nodiscard]] std::span<const kv::TokenId> all_token_ids() const { return token_ids_; }
  [[nodiscard]] std::span<const kv::TokenId> prompt_token_ids() const {
    return all_token_ids().first(num_prompt_tokens_);
  }
  [[nodiscard]] std::span<const kv::TokenId> output_token_ids() const {
    return all_token_ids().subspan(num_prompt_tokens_);
  }
  [[nodiscard]] int num_tokens() const { return static_cast<int>(token_ids_.size()); }
  [[nodiscard]] int num_prompt_tokens() const { return num_prompt_tokens_; }
  [[nodiscard]] int num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }

  /// Tokens whose KV is in this request's blocks. Reset to 0 by preemption (recomputation).
  [[nodiscard]] int num_computed_tokens() const { return num_computed_tokens_; }
  /// Prompt tokens found in the prefix cache at first admission (usage and metrics).
  [[nodiscard]] int num_cached_prompt_tokens() const { return num_cached_prompt_tokens_; }
  [[nodiscard]] int num_preemptions() const { return num_preemptions_; }

  /// Draft tokens proposed for verification at the next step (speculative decoding). They follow
  /// all_token_ids() but are not part of it: their KV may be rejected.
  [[nodiscard]] std::span<const kv::TokenId> spec_token_ids() const { return spec_token_ids_; }
  /// Set between steps, on a running request whose next step is a decode. The scheduler trims
  /// drafts so that the request never outgrows max_tokens.
  void set_spec_token_ids(std::vector<kv::TokenId> spec_token_ids);
  [[nodiscard]] int num_tokens_with_spec() const {
    return num_tokens() + static_cast<int>(spec_token_ids_.size());
  }

  /// Appends output tokens. The scheduler calls this from update_from_output; the engine only
  /// before handing a fork child to the scheduler (the child's own first sampled token).
  void append_output_tokens(std::span<const kv::TokenId> token_ids);

  /// Beam search: the engine chooses this request's tokens itself, from the rows of all the beams
  /// of its group, and appends them with Scheduler::append_tokens; a step that reaches the end of
  /// its tokens leaves it idle (all computed, nothing to schedule) until then. Set before
  /// add_request or fork_request.
  void set_deferred_tokens() { deferred_tokens_ = true; }
  [[nodiscard]] bool deferred_tokens() const { return deferred_tokens_; }
  /// Deferred and waiting for its next token: it holds KV blocks for nothing.
  [[nodiscard]] bool idle() const {
    return deferred_tokens_ && status_ == RequestStatus::kRunning &&
           num_computed_tokens_ >= num_tokens();
  }
  /// Preempted while idle: it waits without being admitted (recomputing would only give the
  /// engine the row it has) until append_tokens gives it a token to compute.
  [[nodiscard]] bool parked() const { return parked_; }

  /// Prefill/decode disaggregation: the request's prompt KV comes from a producer; it waits in
  /// kWaitingForRemoteKV until Scheduler::remote_kv_ready. Set before add_request.
  void set_waiting_for_remote_kv() { status_ = RequestStatus::kWaitingForRemoteKV; }
  /// Full prompt blocks received from a producer (first admission only; see KVRequestView).
  [[nodiscard]] int num_external_blocks() const { return num_external_blocks_; }

  /// What kv::KVCacheManager reads of this request.
  [[nodiscard]] kv::KVRequestView kv_view() const {
    return {id_, token_ids_, num_computed_tokens_, cache_salt_,
            ever_admitted_ ? 0 : num_external_blocks_};
  }

 private:
  friend class Scheduler;

  kv::RequestId id_;
  int priority_;
  uint64_t arrival_order_ = 0;
  int max_tokens_;
  std::string cache_salt_;
  RequestStatus status_ = RequestStatus::kWaiting;
  std::vector<kv::TokenId> token_ids_;  // prompt then output
  int num_prompt_tokens_;
  std::vector<kv::TokenId> spec_token_ids_;
  int num_computed_tokens_ = 0;
  int num_cached_prompt_tokens_ = 0;
  int num_preemptions_ = 0;
  bool ever_admitted_ = false;
  bool deferred_tokens_ = false;
  bool parked_ = false;
  int num_external_blocks_ = 0;

  // Per-step bookkeeping of the Scheduler, so that a step needs no side tables. Each group is
  // valid only while its stamp equals the scheduler's current counter.
  uint64_t schedule_stamp_ = 0;  // schedule(): the step that set the two fields below
  int scheduled_index_ = -1;     // index into SchedulerOutput::scheduled, or -1
  bool preempted_this_step_ = false;
  uint64_t update_stamp_ = 0;  // update_from_output(): the call that set the two fields below
  int update_index_ = -1;      // index into the output being applied
  bool update_sampled_ = false;
};

}  // namespace pagoda::scheduler
