#pragma once
// StepPlanner: the scheduler's output as a StepPlan (runtime/step.h), by value: each scheduled
// request's new tokens (its drafts included) and the changes of its block table since the plan
// that last carried it, and the sequences finished since the last plan. The rows to draw are the
// engine's to fill in (they depend on sampling state the planner does not see).
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "runtime/step.h"
#include "scheduler/scheduler.h"

namespace pagoda {

class StepPlanner {
 public:
  /// The plan of `out`, in its order, with empty rows; the block copies of forks; the sequences
  /// forgotten since the last plan.
  [[nodiscard]] StepPlan plan(const scheduler::SchedulerOutput& out,
                              const scheduler::Scheduler& scheduler, const kv::KVCacheManager& kv);
  /// A sequence the executor may forget (finished or aborted): sent with the next plan.
  void forget(kv::RequestId id);

 private:
  // The block table the executor holds for each sequence, as last sent. A plan sends the part
  // that differs: example, sent [7, 9] and now [7, 9, 4] -> start 2, new blocks [4]; after a
  // preemption that re-allocated [5, 6] -> start 0, new blocks [5, 6].
  std::unordered_map<kv::RequestId, std::vector<int32_t>> sent_;
  std::vector<uint64_t> forgotten_;
};

}  // namespace pagoda
