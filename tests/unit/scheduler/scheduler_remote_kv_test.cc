// The "waiting for remote KV" state (prefill/decode disaggregation's consumer): such a request
// holds no blocks and is never scheduled until remote_kv_ready; then it is admitted with its
// received blocks counted computed (or none: a local prefill), and it can be finished while it
// waits.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "scheduler/scheduler.h"

namespace pagoda::scheduler {
namespace {

struct RemoteFixture {
  kv::KVCacheManager kv{kv::KVCacheConfig{64, 16, true}};
  Scheduler scheduler{
      SchedulerConfig{.max_num_batched_tokens = 256, .max_num_seqs = 8, .max_model_len = 512}, kv};
  void submit(kv::RequestId id, int prompt_len, bool remote) {
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    std::iota(prompt.begin(), prompt.end(), static_cast<int32_t>(id * 1000));
    auto r = std::make_unique<Request>(id, std::move(prompt), 4);
    if (remote) r->set_waiting_for_remote_kv();
    scheduler.add_request(std::move(r));
  }
};

TEST(SchedulerRemoteKV, WaitsWithoutBlocksThenComputesOnlyTheTail) {
  RemoteFixture f;
  f.submit(1, 70, /*remote=*/true);
  f.submit(2, 20, /*remote=*/false);
  EXPECT_EQ(f.scheduler.num_waiting(), 2);
  EXPECT_EQ(f.scheduler.num_waiting_for_remote_kv(), 1);
  EXPECT_TRUE(f.scheduler.has_schedulable_requests());
  SchedulerOutput out = f.scheduler.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);  // only request 2; 1 holds nothing
  EXPECT_EQ(out.scheduled[0].id, 2u);
  EXPECT_FALSE(f.kv.has_request(1));
  EXPECT_EQ(f.scheduler.get(1)->status(), RequestStatus::kWaitingForRemoteKV);
  f.scheduler.finish_request(2, RequestStatus::kFinishedAborted);
  EXPECT_FALSE(f.scheduler.has_schedulable_requests());  // 1 waits for its KV alone

  EXPECT_TRUE(f.scheduler.remote_kv_ready(1, 4));   // blocks 0-3 arrived
  EXPECT_FALSE(f.scheduler.remote_kv_ready(1, 4));  // once
  out = f.scheduler.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].num_computed_tokens, 64);
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 6);  // tokens 64-69
  EXPECT_EQ(f.kv.take_external_loads().size(), 4u);
  EXPECT_EQ(f.scheduler.get(1)->num_cached_prompt_tokens(), 64);
}

TEST(SchedulerRemoteKV, AFailedTransferPrefillsEverythingAndAWaitingRequestCanFinish) {
  RemoteFixture f;
  f.submit(1, 70, true);
  f.submit(2, 40, true);
  EXPECT_TRUE(f.scheduler.remote_kv_ready(1, 0));  // the fallback: a local prefill
  SchedulerOutput out = f.scheduler.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 70);
  EXPECT_TRUE(f.kv.take_external_loads().empty());
  f.scheduler.finish_request(2, RequestStatus::kFinishedAborted);  // aborted while waiting
  EXPECT_EQ(f.scheduler.num_waiting_for_remote_kv(), 0);
  EXPECT_FALSE(f.scheduler.remote_kv_ready(2, 2));  // its pull ends after: ignored
  f.scheduler.finish_request(1, RequestStatus::kFinishedAborted);
  EXPECT_FALSE(f.scheduler.has_unfinished_requests());
  EXPECT_EQ(f.kv.usage(), 0.0);
}

}  // namespace
}  // namespace pagoda::scheduler
