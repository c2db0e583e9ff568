// Tensor parallelism on the CPU (-tp 2, -tp 4) against one rank, on the tiny golden checkpoints and
// stories260K: greedy tokens equal, log-probabilities (the chosen token's and the top 5) within
// kLogprobTolerance. The split changes only the summation order of the row-parallel products (o,
// down: partial sums over each rank's input features, added in rank order by the all-reduce); an
// fp32 dot product of n terms reordered moves by a few ulps times sqrt(n), ~1e-6 relative for these
// sizes, so 1e-4 on a log-probability is two orders above the reordering and an order below the
// 1e-3 of the goldens against transformers. Also: shapes that do not divide are refused by name,
// and a rank that dies ends the engine's requests with a message naming it.
#include <dirent.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
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
#include "pagoda/llm.h"
#include "parallel_golden.h"

namespace pagoda {
namespace {

using nlohmann::json;

constexpr double kLogprobTolerance = 1e-4;

EngineArgs args_for(const std::string& dir, int tp) {
  EngineArgs args = golden::parallel_args(dir, "cpu", tp, int64_t{16} << 20);
  args.distributed_executor_backend = tp > 1 ? "mp" : "uni";
  return args;
}

/// Greedy completions with top-5 log-probabilities of every golden prompt of `dir`, in one batch.
std::vector<GenerateResult> run(const std::string& dir, int tp) {
  LLM llm(args_for(dir, tp));
  return llm.generate(golden::golden_prompts(dir), golden::greedy_top5(12));
}

TEST(TensorParallel, MatchesOneRankOnTheGoldenCheckpoints) {
  const std::vector<std::string> dirs = golden::parallel_checkpoint_dirs();
  int compared = 0;
  for (const std::string& dir : dirs) {
    const std::string name = std::filesystem::path(dir).filename().string();
    const ModelConfig config = load_model_config(dir);
    const std::vector<GenerateResult> one = run(dir, 1);
    for (const int tp : {2, 4}) {
      if (!golden::tensor_parallel_divides(config, tp)) continue;
      const double worst = golden::compare_exact(fmt::format("{} -tp {}", name, tp), one,
                                                 run(dir, tp), kLogprobTolerance);
      std::printf("%-24s -tp %d: greedy tokens equal, max |logprob diff| %.3g\n", name.c_str(), tp,
                  worst);
      ++compared;
    }
  }
  EXPECT_GE(compared, 20);  // every fixture at -tp 2, those with 4 heads at -tp 4 too
}

TEST(TensorParallel, RefusesShapesThatDoNotDivide) {
  const std::string dir = golden::kSource + "/models/stories260K";  // 8 heads, 4 KV heads
  try {
    LLM llm(args_for(dir, 3));
    FAIL() << "-tp 3 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "--tensor-parallel-size 3: num_attention_heads 8 is not divisible by it"),
              std::string::npos)
        << e.what();
  }
  EngineArgs uni = args_for(dir, 2);
  uni.distributed_executor_backend = "uni";
  EXPECT_THROW(LLM{uni}, InvalidArgument);
}

TEST(TensorParallel, ADeadRankEndsTheEngineNamingIt) {
  const std::string dir = golden::kSource + "/models/stories260K";
  LLM llm(args_for(dir, 2));
  golden::expect_a_dead_rank_ends_the_engine(llm);
}

}  // namespace
}  // namespace pagoda
