// Deferred requests (beam search's sequences, Request::set_deferred_tokens): a step that reaches
// the end of their tokens leaves them idle until the engine appends a token; forks of them share
// blocks with copy-on-write of the partial block (the FakeRunner checks every KV slot it reads and
// that no shared block is overwritten); idle requests are preempted first, parked, and not
// readmitted until they get a token. To add a case: drive a Fixture with step_deferred().
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "fake_runner.h"
#include "kv/kv_cache_manager.h"
#include "scheduler/scheduler.h"

namespace pagoda::scheduler {
namespace {

using testing::config_of;
using testing::Fixture;
using testing::kv_of;
using testing::make_prompt;

// One step in which deferred requests get no token back (the engine keeps their rows).
SchedulerOutput step_deferred(Fixture& f) {
  SchedulerOutput out = f.scheduler.schedule();
  testing::NewTokens tokens = f.runner.execute(out);
  std::erase_if(tokens, [&](const auto& t) {
    const Request* r = f.scheduler.get(t.first);
    return r != nullptr && r->deferred_tokens();
  });
  (void)f.scheduler.update_from_output(out, tokens);
  return out;
}

std::unique_ptr<Request> deferred(kv::RequestId id, std::vector<int32_t> prompt, int max_tokens,
                                  std::vector<int32_t> output = {}) {
  auto r = std::make_unique<Request>(id, std::move(prompt), max_tokens);
  if (!output.empty()) r->append_output_tokens(output);
  r->set_deferred_tokens();
  return r;
}

TEST(SchedulerDeferred, IdleUntilAppendedAndForksShareBlocksCopyOnWrite) {
  Fixture f(config_of(64, 8, 64), kv_of(32, /*block_size=*/4));
  const std::vector<int32_t> prompt = make_prompt(10, 1);
  f.scheduler.add_request(deferred(1, prompt, 8));
  SchedulerOutput out = step_deferred(f);
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_TRUE(out.scheduled[0].samples);
  EXPECT_TRUE(f.scheduler.get(1)->idle());
  EXPECT_TRUE(f.scheduler.schedule().scheduled.empty());  // idle: nothing to compute

  // Beam 1 goes on with token 7; beam 2 forks it with token 9: blocks 0 and 1 (8 tokens) shared,
  // the partial block 2 (tokens 8, 9) copied.
  f.scheduler.append_tokens(1, std::vector<int32_t>{7});
  EXPECT_FALSE(f.scheduler.get(1)->idle());
  EXPECT_TRUE(f.scheduler.fork_request(1, deferred(2, {}, 8, {9})));
  const auto parent = f.kv.block_table(1), child = f.kv.block_table(2);
  ASSERT_EQ(child.size(), 3u);
  EXPECT_EQ(child[0], parent[0]);
  EXPECT_EQ(child[1], parent[1]);
  EXPECT_NE(child[2], parent[2]);
  EXPECT_EQ(f.kv.block_pool().block(parent[0]).ref_count, 2);
  const int free_before = f.kv.num_free_blocks();
  out = step_deferred(f);  // both compute their token; the runner checks the copy and the sharing
  ASSERT_EQ(out.scheduled.size(), 2u);
  ASSERT_EQ(out.block_copies.size(), 1u);
  EXPECT_EQ(out.block_copies[0], (kv::BlockCopy{parent[2], child[2]}));
  EXPECT_EQ(f.kv.num_free_blocks(), free_before);  // 11 tokens each fit their 3 blocks
  EXPECT_TRUE(f.scheduler.get(1)->idle() && f.scheduler.get(2)->idle());
  f.scheduler.finish_request(2, RequestStatus::kFinishedAborted);
  EXPECT_EQ(f.kv.block_pool().block(parent[0]).ref_count, 1);
  f.scheduler.finish_request(1, RequestStatus::kFinishedStopped);
  f.drain();
}

TEST(SchedulerDeferred, IdleRequestsArePreemptedFirstAndParkedUntilAppended) {
  // One running slot: the idle beam 1 gives it up to the waiting request 2 and is not readmitted
  // (recomputing would give the engine a row it has) until it gets its next token.
  Fixture f(config_of(64, 1, 64), kv_of(32, 4));
  f.scheduler.add_request(deferred(1, make_prompt(6, 1), 8));
  (void)step_deferred(f);
  ASSERT_TRUE(f.scheduler.get(1)->idle());
  f.submit(2, make_prompt(5, 2), 3);
  SchedulerOutput out = step_deferred(f);
  ASSERT_EQ(out.preempted, std::vector<kv::RequestId>{1});
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].id, 2u);
  EXPECT_TRUE(f.scheduler.get(1)->parked());
  for (int i = 0; i < 4 && f.scheduler.get(2) != nullptr; ++i) (void)step_deferred(f);
  ASSERT_EQ(f.scheduler.get(2), nullptr);                 // finished
  EXPECT_TRUE(f.scheduler.schedule().scheduled.empty());  // 1 stays parked, slot free or not
  f.scheduler.append_tokens(1, std::vector<int32_t>{5});
  EXPECT_FALSE(f.scheduler.get(1)->parked());
  out = step_deferred(f);  // readmitted: recomputes its 6 + 1 tokens and samples
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].num_computed_tokens + out.scheduled[0].num_new_tokens, 7);
  EXPECT_TRUE(out.scheduled[0].samples);
  f.scheduler.finish_request(1, RequestStatus::kFinishedStopped);
  f.drain();
}

}  // namespace
}  // namespace pagoda::scheduler
