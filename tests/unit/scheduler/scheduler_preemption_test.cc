// Preemption by recomputation and aborts: tiny KV pools force preemptions, and every request must
// still finish with the tokens it would produce alone, in a bounded number of steps, with the
// victims always the least urgent requests. To add a case: build a Fixture with a small pool
// (kv_of(num_blocks, block_size)), submit() a workload, step or drain, and assert on
// num_preemptions_total(), the per-request counters and the outputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "fake_runner.h"

namespace pagoda::scheduler {
namespace {

using testing::config_of;
using testing::find;
using testing::Fixture;
using testing::kv_of;
using testing::make_prompt;

struct PreemptionCase {
  SchedulingPolicy policy;
  bool caching;
  int budget;
};

class SchedulerPreemption : public ::testing::TestWithParam<PreemptionCase> {};

// The order in which the policy serves requests; the preempted must always come last in it.
std::pair<int, uint64_t> key(const Request& r, SchedulingPolicy policy) {
  return {policy == SchedulingPolicy::kPriority ? r.priority() : 0, r.arrival_order()};
}

TEST_P(SchedulerPreemption, EveryRequestFinishesWithItsOwnTokens) {
  const PreemptionCase c = GetParam();
  // 16 usable blocks of 4 tokens = 64 tokens for 8 requests that each grow to 50.
  Fixture f(config_of(c.budget, 8, 64, c.policy), kv_of(17, 4, c.caching));
  for (kv::RequestId id = 0; id < 8; ++id) {
    f.submit(id, make_prompt(20, id % 3), 30, /*priority=*/static_cast<int>((id * 5) % 3));
  }
  int steps = 0;
  int64_t preemptions_seen = 0;
  while (f.scheduler.has_unfinished_requests()) {
    ASSERT_LT(++steps, 3000) << "no progress";
    const SchedulerOutput out = f.scheduler.schedule();
    preemptions_seen += static_cast<int64_t>(out.preempted.size());
    for (const kv::RequestId victim : out.preempted) {
      const Request* v = f.scheduler.get(victim);
      ASSERT_NE(v, nullptr);
      EXPECT_EQ(v->status(), RequestStatus::kPreempted);
      EXPECT_EQ(v->num_computed_tokens(), 0);
      EXPECT_FALSE(f.kv.has_request(victim));
      EXPECT_FALSE(find(out, victim)) << "preempted and scheduled in one step";
      // Victims are the least urgent: nothing scheduled this step ranks after them.
      for (const ScheduledRequest& s : out.scheduled) {
        EXPECT_LT(key(*f.scheduler.get(s.id), c.policy), key(*v, c.policy));
      }
    }
    ASSERT_FALSE(out.scheduled.empty()) << "a step with nothing scheduled";
    // Put the step back through the fixture's bookkeeping.
    const testing::NewTokens new_tokens = f.runner.execute(out);
    std::map<kv::RequestId, std::vector<int32_t>> outputs;
    for (const auto& [id, tokens] : new_tokens) {
      const Request* r = f.scheduler.get(id);
      outputs[id].assign(r->output_token_ids().begin(), r->output_token_ids().end());
      outputs[id].insert(outputs[id].end(), tokens.begin(), tokens.end());
    }
    for (const kv::RequestId id : f.scheduler.update_from_output(out, new_tokens)) {
      f.outputs[id] = outputs[id];
    }
  }
  EXPECT_GT(f.scheduler.num_preemptions_total(), 0);
  EXPECT_EQ(f.scheduler.num_preemptions_total(), preemptions_seen);
  ASSERT_EQ(f.outputs.size(), 8u);
  f.drain();
}

INSTANTIATE_TEST_SUITE_P(Cases, SchedulerPreemption,
                         ::testing::Values(PreemptionCase{SchedulingPolicy::kFcfs, true, 64},
                                           PreemptionCase{SchedulingPolicy::kFcfs, false, 64},
                                           PreemptionCase{SchedulingPolicy::kFcfs, true, 7},
                                           PreemptionCase{SchedulingPolicy::kPriority, true, 64},
                                           PreemptionCase{SchedulingPolicy::kPriority, false, 5}));

TEST(SchedulerPreemption, FcfsNeverPreemptsTheOldestRequest) {
  Fixture f(config_of(32, 8, 64), kv_of(17, 4));
  for (kv::RequestId id = 0; id < 6; ++id) f.submit(id, make_prompt(16, id), 40);
  // The oldest unfinished request keeps its blocks: its counters only ever grow.
  int last_computed = 0;
  for (int i = 0; i < 3000 && f.scheduler.has_unfinished_requests(); ++i) {
    f.step();
    const Request* oldest = f.scheduler.get(0);
    if (oldest == nullptr) break;
    EXPECT_EQ(oldest->num_preemptions(), 0);
    EXPECT_GE(oldest->num_computed_tokens(), last_computed);
    last_computed = oldest->num_computed_tokens();
  }
  EXPECT_GT(f.scheduler.num_preemptions_total(), 0);
  f.drain();
  EXPECT_EQ(f.outputs.size(), 6u);
}

TEST(SchedulerPreemption, PreemptedRequestResumesAsNewWithItsOutputKept) {
  // Room for exactly one 32-token request.
  Fixture f(config_of(64, 8, 32), kv_of(9, 4, /*caching=*/false));
  f.submit(1, make_prompt(12, 1), 20);
  f.submit(2, make_prompt(12, 2), 20);
  SchedulerOutput out;
  for (int i = 0; i < 100 && out.preempted.empty(); ++i) out = f.step();
  ASSERT_THAT(out.preempted, ::testing::ElementsAre(2u));
  const Request* r2 = f.scheduler.get(2);
  const int tokens_at_preemption = r2->num_tokens();
  EXPECT_GT(r2->num_output_tokens(), 0);
  EXPECT_EQ(r2->num_preemptions(), 1);
  EXPECT_EQ(f.scheduler.num_waiting(), 1);
  // When it comes back, it recomputes prompt and output from scratch in one go.
  for (int i = 0; i < 100; ++i) {
    out = f.step();
    if (const std::optional<ScheduledRequest> s = find(out, 2)) {
      EXPECT_TRUE(s->resumed_or_new);
      EXPECT_EQ(s->num_computed_tokens, 0);
      EXPECT_EQ(s->num_new_tokens, tokens_at_preemption);
      break;
    }
  }
  f.drain();
  EXPECT_EQ(f.outputs.size(), 2u);
}

// Aborts at each moment of a request's life free its blocks at once.
class SchedulerAbort : public ::testing::Test {
 protected:
  Fixture f{config_of(16, 8, 64), kv_of(17, 4)};

  void abort_and_check(kv::RequestId id) {
    const int free_before = f.kv.num_free_blocks();
    const int held = f.kv.has_request(id) ? static_cast<int>(f.kv.block_table(id).size()) : 0;
    f.scheduler.finish_request(id, RequestStatus::kFinishedAborted);
    EXPECT_EQ(f.scheduler.get(id), nullptr);
    EXPECT_FALSE(f.kv.has_request(id));
    EXPECT_EQ(f.kv.num_free_blocks(), free_before + held);
    f.scheduler.finish_request(id, RequestStatus::kFinishedAborted);  // a no-op the second time
    f.expected.erase(id);
  }
};

TEST_F(SchedulerAbort, WhileWaiting) {
  f.submit(1, make_prompt(10, 1), 5);
  abort_and_check(1);
  EXPECT_FALSE(f.scheduler.has_unfinished_requests());
  EXPECT_TRUE(f.scheduler.schedule().scheduled.empty());
}

TEST_F(SchedulerAbort, MidPrefill) {
  f.submit(1, make_prompt(40, 1), 5);
  f.submit(2, make_prompt(10, 2), 5);
  f.step();
  ASSERT_EQ(f.scheduler.get(1)->num_computed_tokens(), 16);
  abort_and_check(1);
  f.drain();
  EXPECT_EQ(f.outputs.size(), 1u);
}

TEST_F(SchedulerAbort, WhileDecodingAndBetweenScheduleAndUpdate) {
  f.submit(1, make_prompt(6, 1), 20);
  f.submit(2, make_prompt(6, 2), 20);
  f.step();
  f.step();
  ASSERT_GT(f.scheduler.get(1)->num_output_tokens(), 0);
  abort_and_check(1);
  // An abort that lands after schedule() and before update_from_output() skips the request.
  const SchedulerOutput out = f.scheduler.schedule();
  const testing::NewTokens tokens = f.runner.execute(out);
  abort_and_check(2);
  EXPECT_TRUE(f.scheduler.update_from_output(out, tokens).empty());
  EXPECT_FALSE(f.scheduler.has_unfinished_requests());
  f.drain();
}

TEST_F(SchedulerAbort, WhilePreempted) {
  for (kv::RequestId id = 0; id < 4; ++id) f.submit(id, make_prompt(20, id), 40);
  kv::RequestId victim = 0;
  bool found = false;
  for (int i = 0; i < 500 && !found; ++i) {
    const SchedulerOutput out = f.step();
    if (!out.preempted.empty()) {
      victim = out.preempted.front();
      found = f.scheduler.get(victim) != nullptr &&
              f.scheduler.get(victim)->status() == RequestStatus::kPreempted;
    }
  }
  ASSERT_TRUE(found);
  abort_and_check(victim);
  f.drain();
}

TEST(SchedulerStop, FinishingAStoppedRequestFreesItAndOthersContinue) {
  Fixture f(config_of(64, 8, 64), kv_of(17, 4));
  f.submit(1, make_prompt(10, 1), 20);
  f.submit(2, make_prompt(10, 2), 20);
  f.step();
  f.step();
  f.scheduler.finish_request(1, RequestStatus::kFinishedStopped);
  f.expected.erase(1);
  EXPECT_EQ(f.scheduler.num_running(), 1);
  f.drain();
  EXPECT_EQ(f.outputs.size(), 1u);
}

}  // namespace
}  // namespace pagoda::scheduler
