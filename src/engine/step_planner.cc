#include "engine/step_planner.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda {

StepPlan StepPlanner::plan(const scheduler::SchedulerOutput& out,
                           const scheduler::Scheduler& scheduler, const kv::KVCacheManager& kv) {
  StepPlan plan;
  plan.finished.swap(forgotten_);
  for (const kv::BlockCopy& c : out.block_copies) plan.block_copies.emplace_back(c.src, c.dst);
  plan.seqs.reserve(out.scheduled.size());
  for (const scheduler::ScheduledRequest& s : out.scheduled) {
    const scheduler::Request* r = scheduler.get(s.id);
    PAGODA_CHECK(r != nullptr, "scheduled request {} is unknown", s.id);
    PlannedSequence p;
    p.id = s.id;
    p.num_computed = s.num_computed_tokens;
    p.num_spec = s.num_spec_tokens;
    p.fresh = s.resumed_or_new;
    // Tokens [num_computed, num_computed + num_new) of the request's tokens followed by its drafts.
    // Example: 10 tokens, 2 drafts, computed 9, 3 new: token 9, then drafts 0 and 1.
    const auto all = r->all_token_ids();
    const auto spec = r->spec_token_ids();
    p.tokens.reserve(static_cast<size_t>(s.num_new_tokens));
    for (int i = 0; i < s.num_new_tokens; ++i) {
      const int at = s.num_computed_tokens + i;
      const int past = at - r->num_tokens();
      PAGODA_CHECK(past < static_cast<int>(spec.size()),
                   "request {}: token {} past its {} tokens and {} drafts", s.id, at,
                   r->num_tokens(), spec.size());
      p.tokens.push_back(past < 0 ? all[static_cast<size_t>(at)] : spec[static_cast<size_t>(past)]);
    }
    const auto table = kv.block_table(s.id);
    std::vector<int32_t>& sent = sent_[s.id];
    const auto common = static_cast<size_t>(
        std::mismatch(sent.begin(), sent.end(), table.begin(), table.end()).first - sent.begin());
    p.block_table_start = static_cast<int32_t>(common);
    p.new_blocks.assign(table.begin() + static_cast<std::ptrdiff_t>(common), table.end());
    sent.assign(table.begin(), table.end());
    plan.seqs.push_back(std::move(p));
  }
  return plan;
}

void StepPlanner::forget(kv::RequestId id) {
  if (sent_.erase(id) != 0) forgotten_.push_back(id);
}

}  // namespace pagoda
