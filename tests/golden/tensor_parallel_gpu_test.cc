// Tensor parallelism on the GPU (label gpu, run on the device machine): -tp 2 (and -tp 4 where the
// heads divide) against -tp 1, on stories260K and the tiny golden checkpoints, with every rank on
// the machine's GPUs by place_gpu_rank (on a one-GPU machine: all ranks on GPU 0, through the
// host-staged communicator; with a GPU per rank, NCCL).
//
// Rule and tolerance. -tp N changes the roundings of the row-parallel products: each rank's o and
// down partial sums are rounded to bf16 before the all-reduce adds them (one rounding of the whole
// sum at -tp 1), and the small steps' fused GEMVs store instead of accumulating into the residual
// stream. That is the size of the bf16 differences the GPU goldens allow against transformers'
// fp32, so the rule is theirs (vLLM's check_logprobs_close): greedy tokens equal until the first
// divergence, where each side's token must be in the other's top-5 (a near tie), and the chosen
// and top-5 log-probabilities up to it within 0.5 (tiny checkpoints: random weights, large
// logits) and 0.4 (stories260K), the GPU goldens' bounds. A broken shard (a wrong slice, a
// missing all-reduce) moves log-probabilities by order 1 or more and the tokens at once.
// Also: a rank that dies ends the engine naming it, as on the CPU.
//
// Every engine here runs its ranks in worker processes (-tp 1 too: --distributed-executor-backend
// mp), and this process never touches CUDA itself: a process forked after CUDA is initialised
// cannot use it. Without a GPU the workers fail to load ("no CUDA GPU is visible").
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "engine/engine_core.h"
#include "golden_check.h"
#include "model/config.h"
#include "pagoda/llm.h"
#include "parallel_golden.h"

namespace pagoda {
namespace {

using nlohmann::json;

EngineArgs gpu_args(const std::string& dir, int tp) {
  EngineArgs args = golden::parallel_args(dir, "cuda", tp, int64_t{64} << 20);  // per rank
  args.distributed_executor_backend = "mp";  // see the top: never CUDA in this process
  return args;
}

/// Greedy completions with top-5 log-probabilities of every golden prompt of `dir`, in one batch.
std::vector<GenerateResult> run(const std::string& dir, int tp) {
  LLM llm(gpu_args(dir, tp));
  return llm.generate(golden::golden_prompts(dir), golden::greedy_top5(16));
}

bool in_top(const TokenLogprobs& step, int32_t token) {
  return std::any_of(step.top.begin(), step.top.end(),
                     [&](const auto& e) { return e.first == token; });
}

struct Comparison {
  double worst = 0;     // the largest |log-probability difference| before a divergence
  int divergences = 0;  // prompts whose greedy tokens parted (at a near tie)
};

/// check_logprobs_close of -tp N (`many`) against -tp 1 (`one`).
Comparison compare(const std::string& name, const std::vector<GenerateResult>& one,
                   const std::vector<GenerateResult>& many, double tolerance) {
  Comparison c;
  EXPECT_EQ(one.size(), many.size()) << name;
  for (size_t i = 0; i < std::min(one.size(), many.size()); ++i) {
    const CompletionOutput& a = one[i].outputs.at(0);
    const CompletionOutput& b = many[i].outputs.at(0);
    EXPECT_EQ(b.error, "") << name << " prompt " << i;
    const size_t steps =
        std::min({a.token_ids.size(), b.token_ids.size(), a.logprobs.size(), b.logprobs.size()});
    EXPECT_EQ(a.token_ids.size(), b.token_ids.size()) << name << " prompt " << i;
    for (size_t t = 0; t < steps; ++t) {
      const TokenLogprobs& la = a.logprobs[t];
      const TokenLogprobs& lb = b.logprobs[t];
      if (a.token_ids[t] != b.token_ids[t]) {
        EXPECT_TRUE(in_top(la, b.token_ids[t]) && in_top(lb, a.token_ids[t]))
            << name << " prompt " << i << " parts at step " << t
            << " without a near tie: " << a.token_ids[t] << " vs " << b.token_ids[t];
        ++c.divergences;
        break;
      }
      c.worst = std::max(c.worst, std::abs(double{la.logprob} - lb.logprob));
      for (const auto& [token, lp] : la.top) {
        const auto it = std::find_if(lb.top.begin(), lb.top.end(),
                                     [&](const auto& e) { return e.first == token; });
        if (it != lb.top.end()) c.worst = std::max(c.worst, std::abs(double{lp} - it->second));
      }
    }
  }
  EXPECT_LE(c.worst, tolerance) << name;
  return c;
}

TEST(TensorParallelGpu, MatchesOneRankOnTheGoldenCheckpoints) {
  const std::vector<std::string> dirs = golden::parallel_checkpoint_dirs();
  int compared = 0;
  for (const std::string& dir : dirs) {
    const std::string name = std::filesystem::path(dir).filename().string();
    const double tolerance = name == "stories260K" ? 0.4 : 0.5;
    const ModelConfig config = load_model_config(dir);
    const std::vector<GenerateResult> one = run(dir, 1);
    for (const int tp : {2, 4}) {
      if (!golden::tensor_parallel_divides(config, tp)) continue;
      SCOPED_TRACE(fmt::format("{} -tp {}", name, tp));
      const Comparison c =
          compare(fmt::format("{} -tp {}", name, tp), one, run(dir, tp), tolerance);
      std::printf("%-24s -tp %d: max |logprob diff| %.3g, %d of %zu prompts part at a near tie\n",
                  name.c_str(), tp, c.worst, c.divergences, one.size());
      ++compared;
    }
  }
  EXPECT_GE(compared, 20);  // every fixture at -tp 2, those with 4 heads at -tp 4 too
}

// Also the KV pool sized from --gpu-memory-utilization: the ranks sharing the GPU each take
// their share (CudaDecoderModel::device_memory), so that both pools fit.
TEST(TensorParallelGpu, ADeadRankEndsTheEngineNamingIt) {
  const std::string dir = golden::kSource + "/models/stories260K";
  EngineArgs args = gpu_args(dir, 2);
  args.kv_cache_memory_bytes = 0;
  args.gpu_memory_utilization = 0.3;
  LLM llm(args);
  golden::expect_a_dead_rank_ends_the_engine(llm);
}

}  // namespace
}  // namespace pagoda
