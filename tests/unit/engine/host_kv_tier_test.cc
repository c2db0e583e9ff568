// The host KV tier (--kv-offloading-size) through the engine, on the CPU and both executors:
//  - a prompt evicted from a small device pool by other prompts and asked again is served from
//    the host tier: the metrics count host hits, the prompt tokens computed drop to the last
//    partial block, and the output (tokens and log-probabilities) is bit-identical to the first;
//  - a random workload with preemptions on a pool a few prompts large, with the tier, gives the
//    tokens a pool that never evicts gives;
//  - the flag's errors name it.
#include <gtest/gtest.h>

#include "core/status.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using engine_test::greedy;
using engine_test::make_workload;
using engine_test::prompt_of;
using engine_test::small_engine;

// stories260K's KV: 5 layers x 4 KV heads x head_dim 8 x (K, V) x fp32 = 1,280 bytes per token,
// 20,480 per block of 16 tokens.
constexpr int64_t kBlockBytes = 20480;

CompletionOutput run(EngineCore& engine, const std::vector<int32_t>& prompt) {
  EngineRequest r;
  r.prompt_token_ids = prompt;
  r.params = greedy(12, 3);
  return collect_result(*engine.submit(std::move(r))).outputs.at(0);
}

void expect_bitwise(const CompletionOutput& a, const CompletionOutput& b) {
  ASSERT_EQ(a.token_ids, b.token_ids);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t t = 0; t < a.logprobs.size(); ++t) {
    EXPECT_EQ(a.logprobs[t].logprob, b.logprobs[t].logprob) << "token " << t;
    EXPECT_EQ(a.logprobs[t].top, b.logprobs[t].top) << "token " << t;
  }
}

TEST(HostKVTier, AnEvictedPromptIsServedFromTheHostTierWithTheSameOutput) {
  for (const char* backend : {"uni", "mp"}) {
    SCOPED_TRACE(backend);
    // A device pool of 20 usable blocks (320 tokens): one 200-token prompt and its output fit,
    // two others evict it. The host tier holds 4 MiB (204 blocks).
    EngineArgs args = small_engine(2048, true, 21 * kBlockBytes);
    args.max_model_len = 256;
    args.kv_offloading_bytes = int64_t{4} << 20;
    args.distributed_executor_backend = backend;
    EngineCore engine(args);
    EXPECT_EQ(engine.cache_info().host_kv_blocks, (int64_t{4} << 20) / kBlockBytes);
    const std::vector<int32_t> a = prompt_of(200, 1);
    const CompletionOutput first = run(engine, a);
    (void)run(engine, prompt_of(200, 2));
    (void)run(engine, prompt_of(200, 3));
    const EngineStats before = engine.stats();
    EXPECT_EQ(before.external_prefix_cache_hits_tokens, 0);
    EXPECT_GE(before.host_kv_blocks_saved, 12);  // at least A's 12 full prompt blocks

    const CompletionOutput again = run(engine, a);
    const EngineStats after = engine.stats();
    // A's 12 full blocks come back (from the host tier: the others took every device block);
    // only the last 8 prompt tokens are computed.
    EXPECT_EQ(after.external_prefix_cache_hits_tokens - before.external_prefix_cache_hits_tokens,
              192);
    EXPECT_EQ(after.prefix_cache_hits_tokens - before.prefix_cache_hits_tokens, 0);
    EXPECT_EQ(after.prompt_tokens - before.prompt_tokens, 8);
    EXPECT_EQ(after.host_kv_blocks_loaded - before.host_kv_blocks_loaded, 12);
    EXPECT_EQ(
        after.external_prefix_cache_queries_tokens - before.external_prefix_cache_queries_tokens,
        200);
    EXPECT_GT(after.host_kv_cache_usage, 0.0);
    EXPECT_EQ(after.kv_cache_usage, 0.0);
    expect_bitwise(first, again);
  }
}

TEST(HostKVTier, WithoutTheTierTheEvictedPromptIsRecomputed) {
  EngineArgs args = small_engine(2048, true, 21 * kBlockBytes);
  args.max_model_len = 256;
  EngineCore engine(args);
  EXPECT_EQ(engine.cache_info().host_kv_blocks, 0);
  const std::vector<int32_t> a = prompt_of(200, 1);
  const CompletionOutput first = run(engine, a);
  (void)run(engine, prompt_of(200, 2));
  (void)run(engine, prompt_of(200, 3));
  const EngineStats before = engine.stats();
  const CompletionOutput again = run(engine, a);
  EXPECT_EQ(engine.stats().prompt_tokens - before.prompt_tokens, 200);
  EXPECT_EQ(engine.stats().external_prefix_cache_queries_tokens, 0);
  expect_bitwise(first, again);
}

TEST(HostKVTier, RandomWorkloadOnATinyPoolGivesTheTokensOfABigOne) {
  // 64 requests at once on 12 usable blocks (192 tokens, the longest request is 141 tokens):
  // preemptions and evictions all along, host hits on the shared prefixes and the preempted.
  const engine_test::Workload w = make_workload(5);
  std::vector<std::vector<int32_t>> tokens[2];
  EngineStats stats;
  for (int tiny = 0; tiny < 2; ++tiny) {
    EngineArgs args = small_engine(256);
    if (tiny == 1) {
      args.kv_cache_memory_bytes = 13 * kBlockBytes;
      args.max_model_len = 192;
      args.kv_offloading_bytes = 200 * kBlockBytes;
    }
    EngineCore engine(args);
    std::vector<std::shared_ptr<OutputStream>> streams;
    for (size_t i = 0; i < w.prompts.size(); ++i) {
      EngineRequest r;
      r.prompt_token_ids = w.prompts[i];
      r.params = greedy(w.max_tokens[i]);
      streams.push_back(engine.submit(std::move(r)));
    }
    for (auto& s : streams) tokens[tiny].push_back(collect_result(*s).outputs.at(0).token_ids);
    stats = engine.stats();
  }
  for (size_t i = 0; i < w.prompts.size(); ++i) EXPECT_EQ(tokens[0][i], tokens[1][i]) << i;
  EXPECT_GT(stats.num_preemptions, 0);
  EXPECT_GT(stats.external_prefix_cache_hits_tokens, 0);
  EXPECT_GT(stats.host_kv_blocks_loaded, 0);
  EXPECT_EQ(stats.kv_cache_usage, 0.0);
}

TEST(HostKVTier, TheFlagsErrorsNameIt) {
  auto expect_error = [](EngineArgs args, const std::string& what) {
    try {
      EngineCore engine(args);
      ADD_FAILURE() << "no error for " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--kv-offloading-size"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  EngineArgs negative = small_engine();
  negative.kv_offloading_bytes = -1;
  expect_error(negative, "must be >= 0");
  EngineArgs tiny = small_engine();
  tiny.kv_offloading_bytes = kBlockBytes - 1;
  expect_error(tiny, "hold no KV block");
  EngineArgs no_caching = small_engine(2048, /*prefix_caching=*/false);
  no_caching.kv_offloading_bytes = 1 << 20;
  expect_error(no_caching, "needs prefix caching");
}

}  // namespace
}  // namespace pagoda
