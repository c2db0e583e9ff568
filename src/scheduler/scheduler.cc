#include "scheduler/scheduler.h"

#include <algorithm>
#include <utility>

#include "core/status.h"

namespace pagoda::scheduler {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void SchedulerConfig::validate() const {
  if (max_num_batched_tokens < 1) {
    throw InvalidArgument(
        fmt::format("max_num_batched_tokens must be >= 1, got {}", max_num_batched_tokens));
  }
  if (max_num_seqs < 1) {
    throw InvalidArgument(fmt::format("max_num_seqs must be >= 1, got {}", max_num_seqs));
  }
  if (max_model_len < 1) {
    throw InvalidArgument(fmt::format("max_model_len must be >= 1, got {}", max_model_len));
  }
  if (num_lookahead_tokens < 0) {
    throw InvalidArgument(
        fmt::format("num_lookahead_tokens must be >= 0, got {}", num_lookahead_tokens));
  }
}

bool Scheduler::PolicyLess::operator()(const Request* a, const Request* b) const {
  if (policy == SchedulingPolicy::kPriority && a->priority_ != b->priority_) {
    return a->priority_ < b->priority_;
  }
  return a->arrival_order_ < b->arrival_order_;
}

Scheduler::Scheduler(const SchedulerConfig& config, kv::KVCacheManager& kv)
    : config_(config), kv_(kv), less_{config.policy}, waiting_(less_) {
  config_.validate();
  // Why: preemption frees every other request's blocks for the oldest (or most urgent) one, which
  // only guarantees progress if the whole pool can hold one request of the longest length.
  const int64_t block_size = kv_.block_size();
  const int64_t num_usable_blocks = kv_.config().num_blocks - 1;
  const int64_t num_needed_blocks =
      ceil_div(config_.max_model_len + config_.num_lookahead_tokens, block_size);
  if (num_needed_blocks > num_usable_blocks) {
    throw InvalidArgument(fmt::format(
        "the KV cache holds {} tokens ({} blocks of {}), fewer than one request of max_model_len "
        "{} needs ({} blocks); lower --max-model-len or give the KV cache more memory",
        num_usable_blocks * block_size, num_usable_blocks, block_size, config_.max_model_len,
        num_needed_blocks));
  }
}

void Scheduler::validate_new(const Request& request) const {
  const kv::RequestId id = request.id();
  if (request.num_prompt_tokens() == 0) {
    throw InvalidArgument(fmt::format("request {}: the prompt is empty", id));
  }
  if (request.max_tokens() < 1) {
    throw InvalidArgument(
        fmt::format("request {}: max_tokens must be >= 1, got {}", id, request.max_tokens()));
  }
  const int64_t total = int64_t{request.num_prompt_tokens()} + request.max_tokens();
  if (total > config_.max_model_len) {
    throw InvalidArgument(fmt::format(
        "request {}: prompt length {} + max_tokens {} = {} exceeds max_model_len {}", id,
        request.num_prompt_tokens(), request.max_tokens(), total, config_.max_model_len));
  }
  if (request.num_output_tokens() >= request.max_tokens()) {
    throw InvalidArgument(fmt::format("request {}: already has {} output tokens of max_tokens {}",
                                      id, request.num_output_tokens(), request.max_tokens()));
  }
  if (request.num_computed_tokens_ != 0 ||
      (request.status_ != RequestStatus::kWaiting &&
       request.status_ != RequestStatus::kWaitingForRemoteKV)) {
    throw InvalidArgument(fmt::format("request {}: already scheduled elsewhere ({})", id,
                                      to_string(request.status_)));
  }
  if (requests_.contains(id)) {
    throw InvalidArgument(fmt::format("request {}: the id is already in use", id));
  }
}

void Scheduler::add_request(std::unique_ptr<Request> request) {
  if (!request) throw InvalidArgument("add_request: null request");
  if (request->num_output_tokens() != 0) {
    throw InvalidArgument(
        fmt::format("request {}: a new request has no output tokens yet", request->id()));
  }
  validate_new(*request);
  request->arrival_order_ = next_arrival_order_++;
  Request& ref = *request;
  requests_.emplace(ref.id(), std::move(request));
  if (ref.status_ == RequestStatus::kWaitingForRemoteKV) {
    ++num_waiting_for_remote_kv_;
    return;
  }
  enqueue_waiting(ref);
}

bool Scheduler::remote_kv_ready(kv::RequestId id, int num_external_blocks) {
  PAGODA_CHECK(num_external_blocks >= 0, "request {}: {} received blocks", id, num_external_blocks);
  Request* request = get_mutable(id);
  if (request == nullptr || request->status_ != RequestStatus::kWaitingForRemoteKV) return false;
  --num_waiting_for_remote_kv_;
  request->num_external_blocks_ = num_external_blocks;
  request->status_ = RequestStatus::kWaiting;
  enqueue_waiting(*request);
  return true;
}

void Scheduler::enqueue_waiting(Request& request) {
  request.spec_token_ids_.clear();
  waiting_.insert(&request);
}

void Scheduler::insert_running(Request& request) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), &request, less_), &request);
}

int Scheduler::num_tokens_to_schedule(const Request& request, int budget) const {
  const int remaining = request.num_tokens_with_spec() - request.num_computed_tokens_;
  return std::clamp(remaining, 0, budget);
}

void Scheduler::add_to_step(StepState& step, Request& request, int num_new_tokens,
                            bool resumed_or_new) {
  const int num_computed = request.num_computed_tokens_;
  const int end = num_computed + num_new_tokens;
  PAGODA_DCHECK(end <= config_.max_model_len, "request {} would reach {} tokens", request.id(),
                end);
  request.schedule_stamp_ = step_;
  request.scheduled_index_ = static_cast<int>(step.output.scheduled.size());
  request.preempted_this_step_ = false;
  step.output.scheduled.push_back(ScheduledRequest{
      .id = request.id(),
      .num_new_tokens = num_new_tokens,
      .num_computed_tokens = num_computed,
      .num_spec_tokens = std::max(end - request.num_tokens(), 0),
      .resumed_or_new = resumed_or_new,
      .samples = end >= request.num_tokens(),
  });
  step.output.total_num_scheduled_tokens += num_new_tokens;
  step.token_budget -= num_new_tokens;
  ++step.num_scheduled;
}

void Scheduler::preempt(StepState& step, Request& victim) {
  victim.parked_ = victim.idle();
  // Its share of this step (if any) is taken back below: the blocks it would fill stay unwritten.
  kv_.free(victim.id(), /*drop_pending=*/true);
  if (victim.schedule_stamp_ == step_ && victim.scheduled_index_ >= 0) {
    // Take back its share of this step; the dead entry is compacted away at the end of schedule().
    ScheduledRequest& entry = step.output.scheduled[victim.scheduled_index_];
    step.token_budget += entry.num_new_tokens;
    step.output.total_num_scheduled_tokens -= entry.num_new_tokens;
    entry.num_new_tokens = 0;
    --step.num_scheduled;
  }
  victim.schedule_stamp_ = step_;
  victim.scheduled_index_ = -1;
  victim.preempted_this_step_ = true;
  // Recomputation: the prompt and the output so far are all recomputed from scratch on
  // readmission (prefix caching usually finds most of them still cached).
  victim.num_computed_tokens_ = 0;
  victim.status_ = RequestStatus::kPreempted;
  ++victim.num_preemptions_;
  ++num_preemptions_total_;
  step.output.preempted.push_back(victim.id());
  enqueue_waiting(victim);
}

// Running requests, in service order. Why preempt from the back: the back is the latest arrival
// (fcfs) or the least urgent (priority), so the front request always gets its blocks in the end,
// which is what rules out both deadlock and starvation (the pool holds one max_model_len request).
void Scheduler::schedule_running(StepState& step) {
  size_t index = 0;
  while (index < running_.size()) {
    if (step.token_budget == 0 || step.num_scheduled >= config_.max_num_seqs) break;
    Request& request = *running_[index];
    const int num_new_tokens = num_tokens_to_schedule(request, step.token_budget);
    if (num_new_tokens == 0) {
      ++index;
      continue;
    }
    bool allocated = false;
    while (true) {
      allocated =
          kv_.allocate_slots(request.kv_view(), num_new_tokens, {}, config_.num_lookahead_tokens)
              .has_value();
      if (allocated) break;
      Request& victim = *running_.back();
      running_.pop_back();
      preempt(step, victim);
      if (&victim == &request) break;
    }
    if (!allocated) break;  // it preempted itself: it was the last running request
    add_to_step(step, request, num_new_tokens, /*resumed_or_new=*/false);
    ++index;
  }
}

// Why an idle request may be preempted for any waiting one: it only waits for the engine's next
// token (beam search, whose engine already holds its next row), so freeing its blocks and its
// running slot loses no sampled state, only KV that recomputation (and the prefix cache) rebuild.
// Without it, the beams of a group that ran could hold the blocks or the max_num_seqs slots that
// their waiting siblings need before the group can take its next step: a deadlock.
bool Scheduler::preempt_idle(StepState& step) {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (!(*it)->idle()) continue;
    Request& victim = **it;
    running_.erase(std::next(it).base());
    preempt(step, victim);
    return true;
  }
  return false;
}

// Waiting requests in policy order, head-of-line: one that does not fit stops admission, so a
// long prompt is not overtaken forever by short ones. In priority mode a head request strictly
// more urgent than the least urgent running one preempts it (repeatedly) to make room; it never
// preempts an equal or more urgent one, so preemptions cannot cycle.
void Scheduler::schedule_waiting(StepState& step) {
  // Blocks ran short for running requests this step; admitting now would only preempt again.
  if (!step.output.preempted.empty()) return;
  while (!waiting_.empty()) {
    if (step.token_budget == 0 || step.num_scheduled >= config_.max_num_seqs) break;
    // Parked requests (preempted while idle) are passed over: they have nothing to compute.
    const auto head = std::find_if(waiting_.begin(), waiting_.end(),
                                   [](const Request* r) { return !r->parked_; });
    if (head == waiting_.end()) break;
    Request& request = **head;
    if (request.schedule_stamp_ == step_ && request.preempted_this_step_) break;
    if (num_running() >= config_.max_num_seqs && !preempt_idle(step)) break;
    request.spec_token_ids_.clear();
    const kv::ComputedBlocks hits = kv_.get_computed_blocks(request.kv_view());
    const int num_new_tokens =
        std::min(request.num_tokens() - hits.num_computed_tokens, step.token_budget);
    bool allocated = kv_.allocate_slots(request.kv_view(), num_new_tokens, hits).has_value();
    while (!allocated && config_.policy == SchedulingPolicy::kPriority && !running_.empty() &&
           less_(&request, running_.back())) {
      Request& victim = *running_.back();
      running_.pop_back();
      preempt(step, victim);
      // The hits stay valid: freeing blocks never evicts a cached hash.
      allocated = kv_.allocate_slots(request.kv_view(), num_new_tokens, hits).has_value();
    }
    while (!allocated && preempt_idle(step)) {
      allocated = kv_.allocate_slots(request.kv_view(), num_new_tokens, hits).has_value();
    }
    if (!allocated) break;
    // By key: an idle request preempted above may now precede it in the queue.
    waiting_.erase(&request);
    if (!request.ever_admitted_) {
      request.ever_admitted_ = true;
      request.num_cached_prompt_tokens_ =
          std::min(hits.num_computed_tokens, request.num_prompt_tokens());
    }
    request.num_computed_tokens_ = hits.num_computed_tokens;
    request.status_ = RequestStatus::kRunning;
    insert_running(request);
    add_to_step(step, request, num_new_tokens, /*resumed_or_new=*/true);
  }
}

SchedulerOutput Scheduler::schedule() {
  ++step_;
  // Blocks cached from here on hold no KV until this step runs (a victim preempted below never
  // writes its share): see KVCacheManager::begin_window.
  kv_.begin_window();
  StepState step;
  step.token_budget = config_.max_num_batched_tokens;
  step.output.scheduled.reserve(
      std::min<size_t>(running_.size() + waiting_.size(), config_.max_num_seqs));
  schedule_running(step);
  schedule_waiting(step);

  std::vector<ScheduledRequest>& scheduled = step.output.scheduled;
  if (static_cast<int>(scheduled.size()) != step.num_scheduled) {
    std::erase_if(scheduled, [](const ScheduledRequest& s) { return s.num_new_tokens == 0; });
  }
  // Copies for children preempted or finished since their fork are dropped: their blocks are gone.
  for (const auto& [child_id, copy] : pending_copies_) {
    const Request* child = get(child_id);
    if (child != nullptr && child->status_ == RequestStatus::kRunning) {
      step.output.block_copies.push_back(copy);
    }
  }
  pending_copies_.clear();
  return std::move(step.output);
}

std::vector<kv::RequestId> Scheduler::update_from_output(
    const SchedulerOutput& output,
    const std::vector<std::pair<kv::RequestId, std::vector<kv::TokenId>>>& new_tokens) {
  ++update_stamp_;
  const std::vector<ScheduledRequest>& scheduled = output.scheduled;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    const ScheduledRequest& entry = scheduled[i];
    Request* request = get_mutable(entry.id);
    if (request == nullptr || request->status_ != RequestStatus::kRunning) continue;
    PAGODA_CHECK(request->num_computed_tokens_ == entry.num_computed_tokens,
                 "request {}: computed {} tokens, the output was planned at {} (applied twice?)",
                 entry.id, request->num_computed_tokens_, entry.num_computed_tokens);
    // Drafts count once verified, below.
    request->num_computed_tokens_ += entry.num_new_tokens - entry.num_spec_tokens;
    if (entry.samples) request->spec_token_ids_.clear();
    request->update_stamp_ = update_stamp_;
    request->update_index_ = static_cast<int>(i);
    request->update_sampled_ = false;
  }

  std::vector<kv::RequestId> finished;
  for (const auto& [id, tokens] : new_tokens) {
    Request* request = get_mutable(id);
    if (request == nullptr || request->status_ != RequestStatus::kRunning) continue;
    PAGODA_CHECK(request->update_stamp_ == update_stamp_, "request {}: tokens but not scheduled",
                 id);
    const ScheduledRequest& entry = scheduled[request->update_index_];
    const int num_accepted = static_cast<int>(tokens.size()) - 1;
    PAGODA_CHECK(entry.samples && !request->update_sampled_ && num_accepted >= 0 &&
                     num_accepted <= entry.num_spec_tokens,
                 "request {}: {} tokens for a step of {} new tokens ({} drafts, samples={})", id,
                 tokens.size(), entry.num_new_tokens, entry.num_spec_tokens, entry.samples);
    request->update_sampled_ = true;
    // The accepted drafts' KV is kept; the token sampled after them is the next to compute.
    request->num_computed_tokens_ += num_accepted;
    const int room = request->max_tokens_ - request->num_output_tokens();
    request->append_output_tokens(
        std::span(tokens).first(std::min(static_cast<int>(tokens.size()), room)));
    if (request->num_output_tokens() >= request->max_tokens_) finished.push_back(id);
  }
  for (const ScheduledRequest& entry : scheduled) {
    const Request* request = get(entry.id);
    if (request == nullptr || request->status_ != RequestStatus::kRunning || !entry.samples) {
      continue;
    }
    PAGODA_CHECK(request->update_sampled_ || request->deferred_tokens_,
                 "request {}: its step sampled but no token came back; finish it instead",
                 entry.id);
  }
  for (const kv::RequestId id : finished) finish_request(id, RequestStatus::kFinishedLength);
  return finished;
}

void Scheduler::append_tokens(kv::RequestId id, std::span<const kv::TokenId> tokens) {
  Request* request = get_mutable(id);
  PAGODA_CHECK(request != nullptr && request->deferred_tokens_, "append_tokens({}): {}", id,
               request == nullptr ? "unknown request" : "its tokens are not deferred");
  PAGODA_CHECK(request->status_ != RequestStatus::kRunning ||
                   request->num_computed_tokens_ >= request->num_tokens(),
               "append_tokens({}): {} of its {} tokens still to compute", id,
               request->num_tokens() - request->num_computed_tokens_, request->num_tokens());
  PAGODA_CHECK(
      request->num_output_tokens() + static_cast<int>(tokens.size()) < request->max_tokens_,
      "append_tokens({}): {} + {} output tokens reach max_tokens {}", id,
      request->num_output_tokens(), tokens.size(), request->max_tokens_);
  request->append_output_tokens(tokens);
  request->parked_ = false;
}

void Scheduler::finish_request(kv::RequestId id, RequestStatus reason) {
  PAGODA_CHECK(is_finished(reason), "finish_request({}) with non-final status {}", id,
               to_string(reason));
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request* request = it->second.get();
  if (request->status_ == RequestStatus::kRunning) {
    const auto pos = std::find(running_.begin(), running_.end(), request);
    PAGODA_CHECK(pos != running_.end(), "running request {} not in the running list", id);
    running_.erase(pos);
  } else if (request->status_ == RequestStatus::kWaitingForRemoteKV) {
    --num_waiting_for_remote_kv_;  // holds no blocks and is in no queue
  } else {
    const size_t erased = waiting_.erase(request);
    PAGODA_CHECK(erased == 1, "{} request {} not in the waiting queue", to_string(request->status_),
                 id);
  }
  kv_.free(id);
  request->status_ = reason;
  requests_.erase(it);
}

bool Scheduler::fork_request(kv::RequestId parent_id, std::unique_ptr<Request> child) {
  if (!child) throw InvalidArgument("fork_request: null child");
  Request* parent = get_mutable(parent_id);
  if (child->num_prompt_tokens_ == 0) {
    if (parent == nullptr) {
      throw InvalidArgument(
          fmt::format("request {}: fork of unknown or finished request {} needs the prompt",
                      child->id(), parent_id));
    }
    std::vector<kv::TokenId> tokens(parent->prompt_token_ids().begin(),
                                    parent->prompt_token_ids().end());
    tokens.insert(tokens.end(), child->token_ids_.begin(), child->token_ids_.end());
    child->token_ids_ = std::move(tokens);
    child->num_prompt_tokens_ = parent->num_prompt_tokens_;
  }
  validate_new(*child);
  child->arrival_order_ = next_arrival_order_++;
  Request& ref = *child;
  requests_.emplace(ref.id(), std::move(child));

  // Share the longest common prefix the parent has computed, leaving the child one token to
  // compute so that its step produces logits.
  if (parent != nullptr && parent->status_ == RequestStatus::kRunning &&
      kv_.has_request(parent_id)) {
    const std::span<const kv::TokenId> parent_tokens =
        parent->all_token_ids().first(parent->num_computed_tokens_);
    const std::span<const kv::TokenId> child_tokens = ref.all_token_ids();
    const auto mismatch = std::mismatch(parent_tokens.begin(), parent_tokens.end(),
                                        child_tokens.begin(), child_tokens.end());
    const int num_common = static_cast<int>(mismatch.first - parent_tokens.begin());
    const int num_shared = std::min(num_common, ref.num_tokens() - 1);
    if (num_shared > 0) {
      const std::optional<kv::ForkResult> forked = kv_.fork(parent_id, ref.id(), num_shared);
      if (forked) {
        ref.ever_admitted_ = true;
        ref.num_computed_tokens_ = num_shared;
        ref.status_ = RequestStatus::kRunning;
        insert_running(ref);
        if (forked->copy_on_write) pending_copies_.emplace_back(ref.id(), *forked->copy_on_write);
        return true;
      }
    }
  }
  enqueue_waiting(ref);
  return false;
}

const Request* Scheduler::get(kv::RequestId id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

Request* Scheduler::get_mutable(kv::RequestId id) {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

std::vector<kv::RequestId> Scheduler::running_request_ids() const {
  std::vector<kv::RequestId> ids;
  ids.reserve(running_.size());
  for (const Request* request : running_) ids.push_back(request->id());
  return ids;
}

std::vector<kv::RequestId> Scheduler::waiting_request_ids() const {
  std::vector<kv::RequestId> ids;
  ids.reserve(waiting_.size());
  for (const Request* request : waiting_) ids.push_back(request->id());
  return ids;
}

}  // namespace pagoda::scheduler
