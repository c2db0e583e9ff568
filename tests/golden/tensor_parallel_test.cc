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

namespace pagoda {
namespace {

using nlohmann::json;

constexpr double kLogprobTolerance = 1e-4;

EngineArgs args_for(const std::string& dir, int tp) {
  EngineArgs args;
  args.model = dir;
  args.device = "cpu";
  args.num_threads = 1;
  args.kv_cache_memory_bytes = int64_t{16} << 20;
  args.tensor_parallel_size = tp;
  args.distributed_executor_backend = tp > 1 ? "mp" : "uni";
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
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.logprobs = 5;
  LLM llm(args_for(dir, tp));
  return llm.generate(prompts, p);
}

bool divides(const ModelConfig& c, int tp) {
  return c.num_heads % tp == 0 && (c.num_kv_heads % tp == 0 || tp % c.num_kv_heads == 0) &&
         c.intermediate_size % tp == 0;
}

/// Compares -tp N with one rank; returns the largest log-probability difference.
double compare(const std::string& name, const std::vector<GenerateResult>& one,
               const std::vector<GenerateResult>& many) {
  double worst = 0;
  EXPECT_EQ(one.size(), many.size()) << name;
  for (size_t i = 0; i < std::min(one.size(), many.size()); ++i) {
    const CompletionOutput& a = one[i].outputs.at(0);
    const CompletionOutput& b = many[i].outputs.at(0);
    EXPECT_EQ(b.error, "") << name << " prompt " << i;
    EXPECT_EQ(a.token_ids, b.token_ids) << name << " prompt " << i;
    if (a.token_ids != b.token_ids || a.logprobs.size() != b.logprobs.size()) continue;
    for (size_t t = 0; t < a.logprobs.size(); ++t) {
      worst = std::max(worst, std::abs(double{a.logprobs[t].logprob} - b.logprobs[t].logprob));
      for (const auto& [token, lp] : a.logprobs[t].top) {
        const auto it = std::find_if(b.logprobs[t].top.begin(), b.logprobs[t].top.end(),
                                     [&](const auto& e) { return e.first == token; });
        if (it == b.logprobs[t].top.end()) {
          // A near tie at the edge of the top 5 may swap; then the logprob must be at that edge.
          EXPECT_NEAR(lp, b.logprobs[t].top.back().second, kLogprobTolerance)
              << name << " prompt " << i << " step " << t << " token " << token;
          continue;
        }
        worst = std::max(worst, std::abs(double{lp} - it->second));
      }
    }
  }
  EXPECT_LE(worst, kLogprobTolerance) << name;
  return worst;
}

TEST(TensorParallel, MatchesOneRankOnTheGoldenCheckpoints) {
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
    const ModelConfig config = load_model_config(dir);
    const std::vector<GenerateResult> one = run(dir, 1);
    for (const int tp : {2, 4}) {
      if (!divides(config, tp)) continue;
      const double worst = compare(fmt::format("{} -tp {}", name, tp), one, run(dir, tp));
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

TEST(TensorParallel, ADeadRankEndsTheEngineNamingIt) {
  const std::string dir = golden::kSource + "/models/stories260K";
  LLM llm(args_for(dir, 2));
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
  // What `serve` watches: it stops with this message (status 1), and /health answers 503 with it.
  EXPECT_NE(llm.engine().fatal_error().find(want), std::string::npos) << llm.engine().fatal_error();
}

}  // namespace
}  // namespace pagoda
