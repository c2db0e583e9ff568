// Decode context parallelism on the CPU (-tp N -dcp D; model/context_parallel.h) against one
// rank, on the tiny golden checkpoints and stories260K: greedy tokens equal, log-probabilities (the
// chosen token's and the top 5) within kLogprobTolerance. Besides the -tp reordering of the o and
// down sums, -dcp splits each softmax over the D members' positions and merges the partials by
// log-sum-exp: a few more fp32 roundings per attention row (an exp and a division per member),
// ~1e-6 relative, so the 1e-4 of tensor_parallel_test holds. Also: a rank's pool holds D times the
// tokens when its group shared KV heads; chunked prefill over cached positions, prefix caching and
// preemption keep the tokens; -dcp that does not divide -tp is refused by name.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "core/status.h"
#include "engine/engine_core.h"
#include "golden_check.h"
#include "model/config.h"
#include "model/context_parallel.h"
#include "pagoda/llm.h"
#include "parallel_golden.h"

namespace pagoda {
namespace {

using nlohmann::json;

constexpr double kLogprobTolerance = 1e-4;

EngineArgs args_for(const std::string& dir, int tp, int dcp) {
  EngineArgs args = golden::parallel_args(dir, "cpu", tp, int64_t{16} << 20);
  args.decode_context_parallel_size = dcp;
  args.distributed_executor_backend = tp > 1 ? "mp" : "uni";
  return args;
}

SamplingParams greedy(int max_tokens) { return golden::greedy_top5(max_tokens); }

/// Whether -tp tp -dcp dcp can split the model (the shapes of tensor_parallel_test, and groups of
/// dcp ranks whose query heads read whole KV heads).
bool splits(const ModelConfig& c, int tp, int dcp) {
  if (!golden::tensor_parallel_divides(c, tp)) return false;
  try {
    check_context_parallel(c.num_heads, c.num_kv_heads, tp, dcp);
    return true;
  } catch (const InvalidArgument&) {
    return false;
  }
}

/// Compares with one rank's outputs; returns the largest log-probability difference.
double compare(const std::string& name, const std::vector<GenerateResult>& one,
               const std::vector<GenerateResult>& many) {
  return golden::compare_exact(name, one, many, kLogprobTolerance);
}

TEST(DecodeContextParallel, MatchesOneRankOnTheGoldenCheckpoints) {
  const std::vector<std::string> dirs = golden::parallel_checkpoint_dirs();
  int compared = 0;
  for (const std::string& dir : dirs) {
    const std::string name = std::filesystem::path(dir).filename().string();
    const ModelConfig config = load_model_config(dir);
    const std::vector<PromptInput> prompts = golden::golden_prompts(dir);
    std::vector<GenerateResult> one;
    {
      LLM llm(args_for(dir, 1, 1));
      one = llm.generate(prompts, greedy(12));
    }
    for (const auto& [tp, dcp] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{4, 4}}) {
      if (!splits(config, tp, dcp)) continue;
      LLM llm(args_for(dir, tp, dcp));
      const double worst = compare(fmt::format("{} -tp {} -dcp {}", name, tp, dcp), one,
                                   llm.generate(prompts, greedy(12)));
      std::printf("%-24s -tp %d -dcp %d: greedy tokens equal, max |logprob diff| %.3g\n",
                  name.c_str(), tp, dcp, worst);
      ++compared;
    }
  }
  EXPECT_GE(compared, 37);  // every fixture at -tp 2 -dcp 2; those with 4 heads at -tp 4 -dcp 2, 4
}

TEST(DecodeContextParallel, APoolHoldsDTimesTheTokens) {
  // mistral-mqa: 4 heads, 1 KV head, so with -tp 2 or 4 every rank holds a copy of it.
  const std::string dir = golden::kSource + "/tests/data/tiny/mistral-mqa";
  auto capacity = [&](int tp, int dcp) {
    EngineArgs args = args_for(dir, tp, dcp);
    args.kv_cache_memory_bytes = int64_t{1} << 20;
    EngineCore engine(args);
    EXPECT_EQ(engine.cache_info().block_size, 16 * dcp);
    return engine.kv_capacity_tokens();
  };
  const int64_t tp2 = capacity(2, 1);
  EXPECT_GT(tp2, 0);
  EXPECT_EQ(capacity(2, 2), 2 * tp2);
  EXPECT_EQ(capacity(4, 4), 4 * tp2);
}

TEST(DecodeContextParallel, ChunkedPrefillPrefixCachingAndPreemptionKeepTheTokens) {
  const std::string dir = golden::kSource + "/tests/data/tiny/mistral-mqa";
  const ModelConfig config = load_model_config(dir);
  // Six prompts of 70 to 95 tokens, the first four sharing a 64-token prefix.
  std::vector<PromptInput> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> ids;
    const int n = 70 + 5 * i;
    for (int t = 0; t < n; ++t)
      ids.push_back((i >= 4 || t >= 64 ? 37 * i + 11 * t : 11 * t) % 509 + 1);
    prompts.push_back({std::nullopt, ids});
  }
  std::vector<GenerateResult> reference;
  {
    LLM llm(args_for(dir, 1, 1));
    for (const PromptInput& p : prompts) reference.push_back(llm.generate({p}, greedy(24)).at(0));
  }
  // -tp 2 -dcp 2: engine blocks of 32 tokens; 7 blocks (16 tokens per rank each, one the null
  // block) hold 192 tokens, less than the six requests' 700, so requests are preempted and
  // recomputed; 16 tokens per step prefill in chunks over the positions already cached.
  EngineArgs args = args_for(dir, 2, 2);
  const int64_t bytes_per_token = int64_t{config.num_layers} * 2 * config.head_dim * 4;
  args.kv_cache_memory_bytes = 7 * 16 * bytes_per_token;
  args.max_model_len = 160;
  args.max_num_batched_tokens = 16;
  LLM llm(args);
  // The first request alone fills the prefix cache; the rest run together (the next three may
  // find its two blocks of prefix, unless evicted by then).
  std::vector<GenerateResult> got = llm.generate({prompts[0]}, greedy(24));
  const std::vector<PromptInput> rest(prompts.begin() + 1, prompts.end());
  for (GenerateResult& r : llm.generate(rest, greedy(24))) got.push_back(std::move(r));
  const double worst =
      compare("mistral-mqa -tp 2 -dcp 2 (chunked, cached, preempted)", reference, got);
  std::printf("chunked prefill, prefix caching, preemption: max |logprob diff| %.3g\n", worst);
  const EngineStats stats = llm.engine().stats();
  EXPECT_GT(stats.num_preemptions, 0);
  EXPECT_GE(stats.prefix_cache_hits_tokens, 64);
  EXPECT_EQ(llm.engine().kv_capacity_tokens(), 6 * 32);
}

TEST(DecodeContextParallel, RefusesADcpThatDoesNotDivideTheRanks) {
  const std::string dir = golden::kSource + "/models/stories260K";
  try {
    LLM llm(args_for(dir, 4, 3));
    FAIL() << "-tp 4 -dcp 3 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "--decode-context-parallel-size 3: must divide --tensor-parallel-size 4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(check_context_parallel(12, 3, 12, 3), InvalidArgument);  // ranks 3-5: KV 0, 1, 1
  EngineArgs pd = args_for(dir, 2, 2);  // KV transfers move one rank's whole blocks
  pd.kv_transfer_config = KVTransferConfig{};
  pd.kv_transfer_config->kv_role = "kv_consumer";
  try {
    LLM llm(pd);
    FAIL() << "--kv-transfer-config with -dcp 2 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(
        std::string(e.what()).find("--kv-transfer-config with --decode-context-parallel-size 2"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pagoda
