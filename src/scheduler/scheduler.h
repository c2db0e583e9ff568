#pragma once
// The continuous-batching scheduler: each step hands a token budget to running requests first,
// then to waiting ones, with chunked prefill, prefix caching, preemption by recomputation and
// forks (n > 1), all driven by one counter per request (vLLM v1's model).
#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "scheduler/request.h"

namespace pagoda::scheduler {

/// Which request runs first, and which is preempted first (the last in this order).
enum class SchedulingPolicy {
  kFcfs,      // by arrival
  kPriority,  // by priority (lower first), ties by arrival
};

/// The scheduler's limits, as the engine builds them from its flags.
struct SchedulerConfig {
  /// Tokens per step over all requests (`--max-num-batched-tokens`).
  int max_num_batched_tokens = 2048;
  /// Requests per step, and running requests at once (`--max-num-seqs`).
  int max_num_seqs = 256;
  /// Prompt + max_tokens bound of every request (`--max-model-len`).
  int64_t max_model_len = 0;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  /// KV slots reserved past each running request's tokens for speculative drafts.
  int num_lookahead_tokens = 0;

  /// Throws InvalidArgument naming the bad field.
  void validate() const;
};

/// One request's share of a step.
struct ScheduledRequest {
  kv::RequestId id = 0;
  /// Tokens to compute this step, starting at num_computed_tokens: all_token_ids() then, past its
  /// end, num_spec_tokens of spec_token_ids().
  int num_new_tokens = 0;
  /// The request's computed tokens before this step (its first position this step).
  int num_computed_tokens = 0;
  /// Of num_new_tokens, how many are speculative drafts to verify.
  int num_spec_tokens = 0;
  /// New, or resumed after preemption: the runner must (re)build its per-request state.
  bool resumed_or_new = false;
  /// The step reaches the end of the request's tokens, so it samples (a prefill chunk does not).
  bool samples = false;
};

/// What one step computes. The runner reads token ids from Scheduler::get(id) and block tables
/// from KVCacheManager::block_table(id).
struct SchedulerOutput {
  /// In batch order: running requests first, then the ones admitted this step.
  std::vector<ScheduledRequest> scheduled;
  int total_num_scheduled_tokens = 0;
  /// Requests preempted this step (their blocks are free; they wait to recompute).
  std::vector<kv::RequestId> preempted;
  /// Copy-on-write block copies from forks, to do before this step runs.
  std::vector<kv::BlockCopy> block_copies;
};

/// Continuous batching over one KVCacheManager: admits, schedules, preempts, forks and finishes
/// requests. Single-threaded: the engine thread owns it, as it owns the KVCacheManager.
class Scheduler {
 public:
  /// Validates the config; InvalidArgument when the KV pool cannot hold one request of
  /// max_model_len tokens (without that, a lone request could never finish).
  Scheduler(const SchedulerConfig& config, kv::KVCacheManager& kv);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Queues a new request. InvalidArgument (and the request is dropped) for a null or empty prompt,
  /// max_tokens < 1, prompt + max_tokens over max_model_len (naming all three), a duplicate id, or
  /// a request that already has output or computed tokens.
  void add_request(std::unique_ptr<Request> request);

  /// Plans the next step. Changes the KV cache (allocations, preemptions): run the step it returns.
  [[nodiscard]] SchedulerOutput schedule();

  /// After the step ran: advances each scheduled request's computed tokens by what was scheduled,
  /// drops its rejected drafts, and appends its sampled tokens from `new_tokens` (one token for a
  /// request whose step reached the end of its tokens; with drafts, the accepted drafts and then
  /// the sampled token; none for a prefill chunk). Ids finished or aborted since schedule() are
  /// skipped. Requests that reached max_tokens finish here (kFinishedLength, KV freed, forgotten);
  /// their ids are returned so that the engine can emit their final output.
  std::vector<kv::RequestId> update_from_output(
      const SchedulerOutput& output,
      const std::vector<std::pair<kv::RequestId, std::vector<kv::TokenId>>>& new_tokens);

  /// Beam search: appends the engine's chosen tokens to a deferred request (set_deferred_tokens)
  /// that is idle or waiting (a waiting one recomputes them with the rest on readmission). It must
  /// stay under max_tokens: the engine finishes a beam whose next token would reach it.
  void append_tokens(kv::RequestId id, std::span<const kv::TokenId> tokens);

  /// Prefill/decode disaggregation: a request added in kWaitingForRemoteKV got its KV (or not):
  /// it joins the waiting queue, and its first admission loads its first `num_external_blocks`
  /// full blocks from the engine's received bytes instead of computing them (0: a local prefill,
  /// the fallback). A request not in that state (aborted meanwhile) is ignored; returns whether
  /// it was waiting.
  bool remote_kv_ready(kv::RequestId id, int num_external_blocks);

  /// Finishes a request in any state (stop, length or abort): frees its KV at once and forgets it.
  /// An unknown or already finished id is a no-op (an abort may race with a finish).
  void finish_request(kv::RequestId id, RequestStatus reason);

  /// n > 1: `child` (the same prompt, and usually its own first sampled token as output) shares
  /// the running parent's computed KV blocks; the copy-on-write of the partial block goes into the
  /// next SchedulerOutput::block_copies and the child runs from the next step. When the parent is
  /// not running or no block is free for the copy, the child is queued as a new request instead
  /// (prefix caching still finds the parent's full blocks). Returns true when it shares. An empty
  /// child prompt means the parent's prompt. Validates the child as add_request does.
  bool fork_request(kv::RequestId parent_id, std::unique_ptr<Request> child);

  /// The request, or nullptr once finished (or never added).
  [[nodiscard]] const Request* get(kv::RequestId id) const;
  [[nodiscard]] Request* get_mutable(kv::RequestId id);

  [[nodiscard]] bool has_unfinished_requests() const { return !requests_.empty(); }
  /// Unfinished requests other than those waiting for remote KV: whether schedule() may have work.
  [[nodiscard]] bool has_schedulable_requests() const {
    return static_cast<int>(requests_.size()) > num_waiting_for_remote_kv_;
  }
  [[nodiscard]] int num_running() const { return static_cast<int>(running_.size()); }
  /// Waiting requests, those waiting for remote KV included.
  [[nodiscard]] int num_waiting() const {
    return static_cast<int>(waiting_.size()) + num_waiting_for_remote_kv_;
  }
  [[nodiscard]] int num_waiting_for_remote_kv() const { return num_waiting_for_remote_kv_; }
  [[nodiscard]] int64_t num_preemptions_total() const { return num_preemptions_total_; }
  /// Running ids in service order, and waiting ids in admission order: O(n), for tests and
  /// debugging.
  [[nodiscard]] std::vector<kv::RequestId> running_request_ids() const;
  [[nodiscard]] std::vector<kv::RequestId> waiting_request_ids() const;

  [[nodiscard]] const SchedulerConfig& config() const { return config_; }

 private:
  // Service order: the policy's key, then arrival. The last in this order is preempted first.
  struct PolicyLess {
    SchedulingPolicy policy;
    bool operator()(const Request* a, const Request* b) const;
  };
  // The state of the step being planned.
  struct StepState {
    SchedulerOutput output;
    int token_budget = 0;
    int num_scheduled = 0;  // live entries of output.scheduled
  };

  void validate_new(const Request& request) const;
  // Admits or re-queues `request` into waiting_ (status kWaiting or kPreempted).
  void enqueue_waiting(Request& request);
  void insert_running(Request& request);
  void add_to_step(StepState& step, Request& request, int num_new_tokens, bool resumed_or_new);
  // Frees the victim's KV, takes back its share of this step if it had one, and re-queues it.
  void preempt(StepState& step, Request& victim);
  // Preempts the last idle running request (Request::idle) in service order; false if none.
  bool preempt_idle(StepState& step);
  void schedule_running(StepState& step);
  void schedule_waiting(StepState& step);
  // Tokens `request` would compute now within `budget`, drafts included.
  [[nodiscard]] int num_tokens_to_schedule(const Request& request, int budget) const;

  SchedulerConfig config_;
  kv::KVCacheManager& kv_;
  PolicyLess less_;
  std::unordered_map<kv::RequestId, std::unique_ptr<Request>> requests_;  // every unfinished one
  std::vector<Request*> running_;                                         // sorted by less_
  std::set<Request*, PolicyLess> waiting_;                                // sorted by less_
  // Fork copies for the next step, with the child that needs each.
  std::vector<std::pair<kv::RequestId, kv::BlockCopy>> pending_copies_;
  uint64_t next_arrival_order_ = 0;
  uint64_t step_ = 0;          // schedule() calls so far
  uint64_t update_stamp_ = 0;  // update_from_output() calls so far
  int64_t num_preemptions_total_ = 0;
  int num_waiting_for_remote_kv_ = 0;  // requests in kWaitingForRemoteKV (in requests_ only)
};

}  // namespace pagoda::scheduler
