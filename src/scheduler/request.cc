#include "scheduler/request.h"

#include <algorithm>
#include <utility>

namespace pagoda::scheduler {

const char* to_string(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting:
      return "waiting";
    case RequestStatus::kRunning:
      return "running";
    case RequestStatus::kWaitingForRemoteKV:
      return "waiting_for_remote_kv";
    case RequestStatus::kPreempted:
      return "preempted";
    case RequestStatus::kFinishedStopped:
      return "finished_stopped";
    case RequestStatus::kFinishedLength:
      return "finished_length";
    case RequestStatus::kFinishedAborted:
      return "finished_aborted";
  }
  return "unknown";
}

Request::Request(kv::RequestId id, std::vector<kv::TokenId> prompt_token_ids, int max_tokens,
                 int priority, std::string cache_salt)
    : id_(id),
      priority_(priority),
      max_tokens_(max_tokens),
      cache_salt_(std::move(cache_salt)),
      token_ids_(std::move(prompt_token_ids)),
      num_prompt_tokens_(static_cast<int>(token_ids_.size())) {}

void Request::set_spec_token_ids(std::vector<kv::TokenId> spec_token_ids) {
  spec_token_ids_ = std::move(spec_token_ids);
  // Every accepted draft becomes an output token, plus the one sampled after them.
  const int max_drafts = std::max(max_tokens_ - num_output_tokens() - 1, 0);
  if (static_cast<int>(spec_token_ids_.size()) > max_drafts) spec_token_ids_.resize(max_drafts);
}

void Request::append_output_tokens(std::span<const kv::TokenId> token_ids) {
  token_ids_.insert(token_ids_.end(), token_ids.begin(), token_ids.end());
}

}  // namespace pagoda::scheduler
