// The periodic stats line (server/stats_log.h): vLLM's fields over one interval, and silence when
// the engine was idle.
#include "server/stats_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pagoda::server {
namespace {

using ::testing::HasSubstr;

TEST(StatsLine, ThroughputOverTheIntervalAndTheStateAtItsEnd) {
  EngineStats before;
  before.prompt_tokens = 1000;
  before.generation_tokens = 500;
  before.prefix_cache_queries_tokens = 100;
  before.prefix_cache_hits_tokens = 10;
  EngineStats now = before;
  now.prompt_tokens += 2048;
  now.generation_tokens += 640;
  now.num_running = 12;
  now.num_waiting = 3;
  now.kv_cache_usage = 0.256;
  now.prefix_cache_queries_tokens += 400;
  now.prefix_cache_hits_tokens += 100;
  const std::optional<std::string> line = stats_line(before, now, 2.0);
  ASSERT_TRUE(line.has_value());
  EXPECT_THAT(*line, HasSubstr("Avg prompt throughput: 1024.0 tokens/s"));
  EXPECT_THAT(*line, HasSubstr("Avg generation throughput: 320.0 tokens/s"));
  EXPECT_THAT(*line, HasSubstr("Running: 12 reqs, Waiting: 3 reqs"));
  EXPECT_THAT(*line, HasSubstr("KV cache usage: 25.6%"));
  EXPECT_THAT(*line, HasSubstr("Prefix cache hit rate: 25.0%"));  // of this interval's queries
}

TEST(StatsLine, SilentWhenIdleButNotWhileRequestsWait) {
  EngineStats idle;
  idle.prompt_tokens = 7;
  EXPECT_FALSE(stats_line(idle, idle, 10.0).has_value());
  EngineStats waiting = idle;
  waiting.num_waiting = 1;  // queued behind a full KV cache: no tokens, but worth a line
  EXPECT_TRUE(stats_line(idle, waiting, 10.0).has_value());
  EXPECT_TRUE(stats_line(waiting, idle, 10.0).has_value());  // the interval it drained in
}

TEST(StatsLine, SpecDecodingOverTheInterval) {
  EngineStats before, now;
  now.generation_tokens = 50;
  EXPECT_EQ(stats_line(before, now, 1.0)->find("SpecDecoding"), std::string::npos);
  now.spec_decode_num_drafts = 20;
  now.spec_decode_num_draft_tokens = 80;
  now.spec_decode_num_accepted_tokens = 30;
  EXPECT_NE(
      stats_line(before, now, 1.0)
          ->find("SpecDecoding: mean acceptance length 2.50, accepted 30/80 draft tokens (37.5%)"),
      std::string::npos);
}

}  // namespace
}  // namespace pagoda::server
