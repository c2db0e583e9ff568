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

namespace pagoda {
namespace {

using nlohmann::json;

EngineArgs gpu_args(const std::string& dir, int tp) {
  EngineArgs args;
  args.model = dir;
  args.device = "cuda";
  args.num_threads = 1;
  args.kv_cache_memory_bytes = int64_t{64} << 20;  // per rank
  args.tensor_parallel_size = tp;
  args.distributed_executor_backend = "mp";  // see the top: never CUDA in this process
  const json golden = json::parse(read_text_file(dir + "/golden.json"));
  if (golden.contains("max_model_len"))
    args.max_model_len = golden.at("max_model_len").get<int64_t>();
  return args;
}

/// Greedy completions with top-5 log-probabilities of every golden prompt of `dir`, in one batch.
std::vector<GenerateResult> run(const std::string& dir, int tp) {
  const json golden = json::parse(read_text_file(dir + "/golden.json"));
  std::vector<PromptInput> prompts;
  for (const json& c : golden.at("cases"))
    prompts.push_back({std::nullopt, c.at("prompt_ids").get<std::vector<int32_t>>()});
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 16;
  p.ignore_eos = true;
  p.logprobs = 5;
  LLM llm(gpu_args(dir, tp));
  return llm.generate(prompts, p);
}

bool divides(const ModelConfig& c, int tp) {
  return c.num_heads % tp == 0 && (c.num_kv_heads % tp == 0 || tp % c.num_kv_heads == 0) &&
         c.intermediate_size % tp == 0 && c.vocab_size >= tp;
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
  std::vector<std::string> dirs = {golden::kSource + "/models/stories260K"};
  for (const char* n : golden::kTinyFixtures)
    dirs.push_back(golden::kSource + "/tests/data/tiny/" + n);
  for (const char* n : golden::kFamilyFixtures) {
    const std::string dir = golden::kSource + "/tests/data/tiny/" + n;
    if (std::filesystem::exists(dir)) dirs.push_back(dir);
  }
  int compared = 0;
  for (const std::string& dir : dirs) {
    const std::string name = std::filesystem::path(dir).filename().string();
    const double tolerance = name == "stories260K" ? 0.4 : 0.5;
    const ModelConfig config = load_model_config(dir);
    const std::vector<GenerateResult> one = run(dir, 1);
    for (const int tp : {2, 4}) {
      if (!divides(config, tp)) continue;
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

/// The pids of this process's children (the engine's rank workers).
std::vector<pid_t> child_pids() {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(entry.path() / "stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == ::getpid()) out.push_back(static_cast<pid_t>(std::stoi(pid)));
  }
  return out;
}

// Also the KV pool sized from --gpu-memory-utilization: the ranks sharing the GPU each take
// their share (CudaDecoderModel::device_memory), so that both pools fit.
TEST(TensorParallelGpu, ADeadRankEndsTheEngineNamingIt) {
  const std::string dir = golden::kSource + "/models/stories260K";
  EngineArgs args = gpu_args(dir, 2);
  args.kv_cache_memory_bytes = 0;
  args.gpu_memory_utilization = 0.3;
  LLM llm(args);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 4;
  const std::vector<PromptInput> prompt = {{std::nullopt, {1, 15, 43, 9}}};
  ASSERT_EQ(llm.generate(prompt, p).at(0).outputs.at(0).error, "");
  EXPECT_EQ(llm.engine().fatal_error(), "");
  const std::vector<pid_t> ranks = child_pids();
  ASSERT_EQ(ranks.size(), 2u);
  const pid_t victim = ranks.back();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const std::string want = fmt::format("(pid {}) exited, killed by signal 9", victim);
  for (int attempt = 0; attempt < 2; ++attempt) {  // the group stays stopped
    const CompletionOutput out = llm.generate(prompt, p).at(0).outputs.at(0);
    EXPECT_NE(out.error.find("tensor-parallel rank"), std::string::npos) << out.error;
    EXPECT_NE(out.error.find(want), std::string::npos) << out.error;
  }
  EXPECT_NE(llm.engine().fatal_error().find(want), std::string::npos) << llm.engine().fatal_error();
}

}  // namespace
}  // namespace pagoda
