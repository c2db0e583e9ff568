// Scheduler behaviour, case by case: token budget and chunked prefill, prefix caching, policies,
// admission errors, forks and speculative drafts. Each test builds a KVCacheManager and a
// Scheduler with make(), then drives them with the FakeRunner (fake_runner.h), which checks the KV
// contents and samples deterministic tokens; reference_output() gives the tokens a request must
// produce. To add a case: write a TEST using Fixture, submit() requests, step() and assert on the
// SchedulerOutput and on the Request counters; finish with drain() to check that every block is
// free again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "fake_runner.h"
#include "kv/kv_cache_manager.h"
#include "scheduler/scheduler.h"

namespace pagoda::scheduler {
namespace {

using testing::config_of;
using testing::FakeRunner;
using testing::find;
using testing::Fixture;
using testing::kv_of;
using testing::make_prompt;
using testing::reference_output;

TEST(SchedulerBudget, ChunksAPromptAndServesRunningRequestsFirst) {
  Fixture f(config_of(16, 8, 256), kv_of(64));
  f.submit(1, make_prompt(40, 1), 3);
  f.submit(2, make_prompt(10, 2), 3);

  SchedulerOutput out = f.step();  // 1: chunk [0, 16); 2 gets nothing: the budget is spent
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].id, 1u);
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 16);
  EXPECT_TRUE(out.scheduled[0].resumed_or_new);
  EXPECT_FALSE(out.scheduled[0].samples);
  EXPECT_EQ(f.scheduler.get(1)->num_computed_tokens(), 16);
  EXPECT_EQ(f.scheduler.get(1)->num_output_tokens(), 0);

  out = f.step();  // 1: [16, 32)
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].num_computed_tokens, 16);
  EXPECT_FALSE(out.scheduled[0].resumed_or_new);

  out = f.step();  // 1: last 8 tokens and samples; 2 is admitted with the 8 left
  ASSERT_EQ(out.scheduled.size(), 2u);
  EXPECT_EQ(out.scheduled[0].id, 1u);
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 8);
  EXPECT_TRUE(out.scheduled[0].samples);
  EXPECT_EQ(out.scheduled[1].id, 2u);
  EXPECT_EQ(out.scheduled[1].num_new_tokens, 8);
  EXPECT_EQ(out.total_num_scheduled_tokens, 16);
  EXPECT_EQ(f.scheduler.get(1)->num_output_tokens(), 1);

  out = f.step();  // 1 decodes one token; 2 finishes its prompt
  ASSERT_EQ(out.scheduled.size(), 2u);
  EXPECT_EQ(out.scheduled[0].id, 1u);
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 1);
  EXPECT_EQ(out.scheduled[1].num_new_tokens, 2);
  EXPECT_FALSE(out.scheduled[1].resumed_or_new);

  out = f.step();  // both decode
  EXPECT_EQ(out.total_num_scheduled_tokens, 2);
  f.drain();
  EXPECT_EQ(f.outputs.size(), 2u);
}

class SchedulerBudgetSweep : public ::testing::TestWithParam<int> {};

TEST_P(SchedulerBudgetSweep, NeverExceedsTheBudgetOrMaxNumSeqs) {
  const int budget = GetParam();
  const int max_seqs = 5;
  Fixture f(config_of(budget, max_seqs, 1024), kv_of(600));
  for (kv::RequestId id = 0; id < 12; ++id) {
    f.submit(id, make_prompt(30 + 97 * static_cast<int>(id) % 700, id), 4 + id % 5);
  }
  int steps = 0;
  bool saw_chunk = false, saw_mixed = false;
  while (f.scheduler.has_unfinished_requests()) {
    ASSERT_LT(++steps, 5000);
    std::map<kv::RequestId, int> remaining;  // what each running request has left to compute
    for (const kv::RequestId id : f.scheduler.running_request_ids()) {
      const Request* r = f.scheduler.get(id);
      remaining[id] = r->num_tokens() - r->num_computed_tokens();
    }
    const SchedulerOutput out = f.step();
    ASSERT_FALSE(out.scheduled.empty());
    EXPECT_LE(out.total_num_scheduled_tokens, budget);
    EXPECT_LE(static_cast<int>(out.scheduled.size()), max_seqs);
    int sum = 0, used = 0;
    bool admitted_seen = false;
    for (const ScheduledRequest& s : out.scheduled) {
      sum += s.num_new_tokens;
      EXPECT_GE(s.num_new_tokens, 1);
      if (s.resumed_or_new) {
        admitted_seen = true;
      } else {
        EXPECT_FALSE(admitted_seen) << "a running request after an admitted one";
        // A running request gets everything it has left, or all the budget that was left.
        ASSERT_TRUE(remaining.contains(s.id));
        EXPECT_EQ(s.num_new_tokens, std::min(remaining[s.id], budget - used));
        if (remaining[s.id] == 1) {
          EXPECT_EQ(s.num_new_tokens, 1);  // a decode
        }
      }
      if (s.num_new_tokens > 1 && !s.samples) saw_chunk = true;
      used += s.num_new_tokens;
    }
    if (admitted_seen && out.scheduled.front().resumed_or_new == false) saw_mixed = true;
    EXPECT_EQ(sum, out.total_num_scheduled_tokens);
    // Running requests come first: a waiting one is only admitted once every running one that
    // fits in max_num_seqs was served.
    if (admitted_seen) {
      int num_running_served = 0;
      for (const ScheduledRequest& s : out.scheduled) num_running_served += !s.resumed_or_new;
      EXPECT_EQ(num_running_served, static_cast<int>(remaining.size()));
    }
  }
  EXPECT_TRUE(saw_mixed);
  if (budget < 700) {
    EXPECT_TRUE(saw_chunk);
  }
  f.drain();
  EXPECT_EQ(f.outputs.size(), 12u);
}

INSTANTIATE_TEST_SUITE_P(Budgets, SchedulerBudgetSweep, ::testing::Values(16, 64, 512));

TEST(SchedulerBudget, MaxNumSeqsCapsRunningRequests) {
  Fixture f(config_of(512, 2, 256), kv_of(64));
  for (kv::RequestId id = 0; id < 4; ++id) f.submit(id, make_prompt(8, id), 3);
  const SchedulerOutput out = f.step();
  EXPECT_EQ(out.scheduled.size(), 2u);
  EXPECT_EQ(f.scheduler.num_running(), 2);
  EXPECT_EQ(f.scheduler.num_waiting(), 2);
  f.drain();
}

TEST(SchedulerPrefixCache, SecondRequestSchedulesOnlyItsSuffix) {
  Fixture f(config_of(512, 8, 512), kv_of(64));
  const std::vector<int32_t> shared = make_prompt(100, 7);
  std::vector<int32_t> a = shared, b = shared;
  a.push_back(11);
  b.insert(b.end(), {12, 13, 14});
  f.submit(1, a, 2);
  SchedulerOutput out = f.step();
  EXPECT_EQ(find(out, 1)->num_new_tokens, 101);
  EXPECT_EQ(f.scheduler.get(1)->num_cached_prompt_tokens(), 0);

  f.submit(2, b, 2);
  out = f.step();
  const std::optional<ScheduledRequest> s = find(out, 2);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->num_computed_tokens, 96);  // 6 full blocks of 16
  EXPECT_EQ(s->num_new_tokens, 103 - 96);
  EXPECT_EQ(f.scheduler.get(2)->num_cached_prompt_tokens(), 96);

  // The same prompt under another salt shares nothing, and under the same salt again shares.
  f.submit(3, b, 2, 0, "tenant-b");
  out = f.step();
  EXPECT_EQ(find(out, 3)->num_computed_tokens, 0);
  EXPECT_EQ(find(out, 3)->num_new_tokens, 103);
  EXPECT_EQ(f.scheduler.get(3)->num_cached_prompt_tokens(), 0);
  f.submit(4, b, 2, 0, "tenant-b");
  out = f.step();
  EXPECT_EQ(find(out, 4)->num_computed_tokens, 96);
  EXPECT_EQ(f.scheduler.get(4)->num_cached_prompt_tokens(), 96);
  f.drain();
  EXPECT_EQ(f.outputs.size(), 4u);
}

TEST(SchedulerPrefixCache, CachedPrefixStillChunksTheRest) {
  Fixture f(config_of(16, 8, 512), kv_of(64));
  const std::vector<int32_t> prompt = make_prompt(80, 3);
  f.submit(1, prompt, 1);
  f.drain();
  std::vector<int32_t> longer = prompt;
  const std::vector<int32_t> tail = make_prompt(40, 4);
  longer.insert(longer.end(), tail.begin(), tail.end());
  f.submit(2, longer, 1);
  const SchedulerOutput out = f.step();
  EXPECT_EQ(find(out, 2)->num_computed_tokens, 80);
  EXPECT_EQ(find(out, 2)->num_new_tokens, 16);
  f.drain();
}

std::vector<kv::RequestId> admission_order(SchedulingPolicy policy,
                                           const std::vector<int>& priorities) {
  Fixture f(config_of(512, 1, 256, policy), kv_of(64));
  for (size_t i = 0; i < priorities.size(); ++i) {
    f.submit(100 + i, make_prompt(5, i), 2, priorities[i]);
  }
  std::vector<kv::RequestId> order;
  while (f.scheduler.has_unfinished_requests()) {
    for (const ScheduledRequest& s : f.step().scheduled) {
      if (s.resumed_or_new) order.push_back(s.id);
    }
  }
  f.drain();
  return order;
}

TEST(SchedulerPolicy, PriorityRunsLowerValuesFirstAndTiesByArrival) {
  EXPECT_THAT(admission_order(SchedulingPolicy::kPriority, {3, 1, 2, 1, -5}),
              ::testing::ElementsAre(104, 101, 103, 102, 100));
}

TEST(SchedulerPolicy, FcfsIgnoresPriority) {
  EXPECT_THAT(admission_order(SchedulingPolicy::kFcfs, {3, 1, 2, 1, -5}),
              ::testing::ElementsAre(100, 101, 102, 103, 104));
}

TEST(SchedulerPolicy, UrgentWaitingRequestPreemptsALessUrgentRunningOne) {
  // 8 usable blocks of 4 tokens: room for one 32-token request.
  Fixture f(config_of(64, 8, 32, SchedulingPolicy::kPriority), kv_of(9, 4));
  f.submit(1, make_prompt(20, 1), 10, /*priority=*/5);
  f.step();
  f.step();
  f.submit(2, make_prompt(20, 2), 10, /*priority=*/0);
  const SchedulerOutput out = f.step();
  EXPECT_THAT(out.preempted, ::testing::ElementsAre(1u));
  ASSERT_EQ(out.scheduled.size(), 1u);  // 1's decode was taken back
  EXPECT_EQ(out.scheduled[0].id, 2u);
  EXPECT_EQ(out.total_num_scheduled_tokens, 20);
  EXPECT_EQ(f.scheduler.get(1)->status(), RequestStatus::kPreempted);
  EXPECT_EQ(f.scheduler.get(1)->num_computed_tokens(), 0);
  EXPECT_FALSE(f.kv.has_request(1));
  EXPECT_EQ(f.scheduler.num_preemptions_total(), 1);

  // An equally urgent newcomer does not preempt: it waits.
  f.submit(3, make_prompt(20, 3), 10, /*priority=*/0);
  const SchedulerOutput next = f.step();
  EXPECT_TRUE(next.preempted.empty());
  EXPECT_FALSE(find(next, 3));
  f.drain();
  EXPECT_EQ(f.outputs.size(), 3u);
}

TEST(SchedulerPolicy, APreemptedRequestsUnwrittenBlocksLeaveThePrefixCache) {
  // 10 usable blocks of 4 tokens, 20 tokens per step. Request 1's second chunk (tokens 20..29)
  // fills its blocks 5 and 6, which allocate_slots caches before the step runs; request 2 is more
  // urgent, needs 3 blocks where 2 are free, and preempts 1 in that same step, so the chunk never
  // runs: blocks 5 and 6 must not be found by a later prompt (they hold no KV of those tokens).
  Fixture f(config_of(20, 8, 40, SchedulingPolicy::kPriority), kv_of(11, 4));
  const std::vector<int32_t> prompt = make_prompt(30, 1);
  f.submit(1, prompt, 10, /*priority=*/5);
  f.step();  // tokens 0..19: blocks 0..4, written by this step
  f.submit(2, make_prompt(10, 2), 10, /*priority=*/0);
  const SchedulerOutput out = f.step();
  ASSERT_THAT(out.preempted, ::testing::ElementsAre(1u));
  f.kv.begin_window();
  const kv::KVRequestView view{99, prompt, 0, ""};
  EXPECT_EQ(f.kv.get_computed_blocks(view).num_computed_tokens, 20);
  f.drain();
  EXPECT_EQ(f.outputs.size(), 2u);
}

TEST(SchedulerAdmission, RejectsTooLongRequestsNamingBothLengths) {
  Fixture f(config_of(64, 8, 64), kv_of(16));
  try {
    f.scheduler.add_request(std::make_unique<Request>(1, make_prompt(50, 1), 20));
    FAIL() << "accepted prompt 50 + max_tokens 20 over max_model_len 64";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("prompt length 50"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("max_tokens 20"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("max_model_len 64"));
  }
  EXPECT_FALSE(f.scheduler.has_unfinished_requests());
  // Exactly at the limit is fine.
  f.scheduler.add_request(std::make_unique<Request>(2, make_prompt(44, 1), 20));
  EXPECT_EQ(f.scheduler.num_waiting(), 1);
}

TEST(SchedulerAdmission, RejectsMalformedRequests) {
  Fixture f(config_of(64, 8, 64), kv_of(16));
  EXPECT_THROW(f.scheduler.add_request(std::make_unique<Request>(1, std::vector<int32_t>{}, 5)),
               InvalidArgument);
  EXPECT_THROW(f.scheduler.add_request(std::make_unique<Request>(1, make_prompt(4, 1), 0)),
               InvalidArgument);
  EXPECT_THROW(f.scheduler.add_request(nullptr), InvalidArgument);
  f.scheduler.add_request(std::make_unique<Request>(1, make_prompt(4, 1), 5));
  EXPECT_THROW(f.scheduler.add_request(std::make_unique<Request>(1, make_prompt(4, 2), 5)),
               InvalidArgument);
  EXPECT_EQ(f.scheduler.num_waiting(), 1);
}

TEST(SchedulerAdmission, RejectsAPoolThatCannotHoldOneLongestRequest) {
  kv::KVCacheManager kv(kv_of(5, 16));  // 64 tokens
  EXPECT_THROW(Scheduler(config_of(64, 8, 65), kv), InvalidArgument);
  EXPECT_NO_THROW(Scheduler(config_of(64, 8, 64), kv));
  EXPECT_THROW(Scheduler(config_of(0, 8, 64), kv), InvalidArgument);
  EXPECT_THROW(Scheduler(config_of(64, 0, 64), kv), InvalidArgument);
}

TEST(SchedulerFork, ChildrenShareTheParentsBlocksAndGetCopyOnWrite) {
  Fixture f(config_of(512, 8, 256), kv_of(64));
  const std::vector<int32_t> prompt = make_prompt(37, 9);  // 2 full blocks + 5 tokens
  f.submit(1, prompt, 6);
  f.step();  // the whole prompt, and the parent's first token
  const Request* parent = f.scheduler.get(1);
  ASSERT_EQ(parent->num_computed_tokens(), 37);
  const std::vector<kv::BlockId> parent_table(f.kv.block_table(1).begin(),
                                              f.kv.block_table(1).end());
  ASSERT_EQ(parent_table.size(), 3u);

  for (kv::RequestId child_id : {2, 3}) {
    // The engine samples the child's own first token from the same logits.
    const int32_t first = static_cast<int32_t>(500 + child_id);
    auto child = std::make_unique<Request>(child_id, std::vector<int32_t>{}, 6);
    child->append_output_tokens(std::vector<int32_t>{first});
    std::vector<int32_t> tokens = prompt;
    tokens.push_back(first);
    f.expected[child_id] = reference_output(tokens, 37, 6);
    EXPECT_TRUE(f.scheduler.fork_request(1, std::move(child)));
    const Request* c = f.scheduler.get(child_id);
    EXPECT_EQ(c->status(), RequestStatus::kRunning);
    EXPECT_EQ(c->num_computed_tokens(), 37);
    EXPECT_EQ(c->num_prompt_tokens(), 37);
    const std::span<const kv::BlockId> table = f.kv.block_table(child_id);
    ASSERT_EQ(table.size(), 3u);
    EXPECT_EQ(table[0], parent_table[0]);
    EXPECT_EQ(table[1], parent_table[1]);
    EXPECT_NE(table[2], parent_table[2]);
  }
  EXPECT_EQ(f.kv.block_pool().block(parent_table[0]).ref_count, 3);
  const std::vector<kv::BlockId> t2(f.kv.block_table(2).begin(), f.kv.block_table(2).end());
  const std::vector<kv::BlockId> t3(f.kv.block_table(3).begin(), f.kv.block_table(3).end());

  const SchedulerOutput out = f.step();
  EXPECT_THAT(out.block_copies,
              ::testing::UnorderedElementsAre(kv::BlockCopy{parent_table[2], t2[2]},
                                              kv::BlockCopy{parent_table[2], t3[2]}));
  for (kv::RequestId id : {1, 2, 3}) {
    ASSERT_TRUE(find(out, id)) << id;
    EXPECT_EQ(find(out, id)->num_new_tokens, 1);
  }
  EXPECT_TRUE(f.step().block_copies.empty());  // copies go out once
  f.drain();
  EXPECT_EQ(f.outputs.size(), 3u);
  EXPECT_NE(f.outputs[2], f.outputs[3]);
}

TEST(SchedulerFork, FallsBackToANewRequestWhenTheParentIsGone) {
  Fixture f(config_of(512, 8, 256), kv_of(64));
  const std::vector<int32_t> prompt = make_prompt(40, 5);
  f.submit(1, prompt, 1);
  f.step();  // the parent finishes at once (max_tokens 1)
  ASSERT_EQ(f.scheduler.get(1), nullptr);
  auto child = std::make_unique<Request>(2, prompt, 3);
  child->append_output_tokens(std::vector<int32_t>{42});
  std::vector<int32_t> tokens = prompt;
  tokens.push_back(42);
  f.expected[2] = reference_output(tokens, 40, 3);
  EXPECT_FALSE(f.scheduler.fork_request(1, std::move(child)));
  EXPECT_EQ(f.scheduler.get(2)->status(), RequestStatus::kWaiting);
  const SchedulerOutput out = f.step();
  EXPECT_EQ(find(out, 2)->num_computed_tokens, 32);  // the parent's full blocks, from the cache
  f.drain();
  EXPECT_EQ(f.outputs[2], f.expected[2]);
}

TEST(SchedulerSpec, DraftsAreScheduledVerifiedAndRejectedOnesRolledBack) {
  SchedulerConfig config = config_of(512, 8, 256);
  config.num_lookahead_tokens = 3;
  Fixture f(config, kv_of(128, 4));
  const std::vector<int32_t> prompt = make_prompt(10, 1);
  f.submit(1, prompt, 20);
  f.step();
  const std::vector<int32_t> want = f.expected[1];
  // Propose the next three tokens: two right, one wrong.
  Request* r = f.scheduler.get_mutable(1);
  ASSERT_EQ(r->num_output_tokens(), 1);
  r->set_spec_token_ids({want[1], want[2], want[3] + 1});
  const SchedulerOutput out = f.step();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 4);
  EXPECT_EQ(out.scheduled[0].num_spec_tokens, 3);
  EXPECT_TRUE(out.scheduled[0].samples);
  // Two drafts accepted plus the corrected token; the rejected draft's KV no longer counts.
  r = f.scheduler.get_mutable(1);
  EXPECT_EQ(r->num_output_tokens(), 4);
  EXPECT_EQ(r->num_computed_tokens(), r->num_tokens() - 1);
  EXPECT_TRUE(r->spec_token_ids().empty());
  // Lookahead slots are reserved past the scheduled tokens.
  EXPECT_GE(static_cast<int>(f.kv.block_table(1).size()) * 4, r->num_tokens() + 3);
  // Drafts are trimmed so that the output never passes max_tokens.
  r->set_spec_token_ids(std::vector<int32_t>(40, 7));
  EXPECT_EQ(r->spec_token_ids().size(), 20u - 4u - 1u);
  f.drain();
  EXPECT_EQ(f.outputs[1], want);
}

}  // namespace
}  // namespace pagoda::scheduler
