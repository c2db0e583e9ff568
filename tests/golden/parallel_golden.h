#pragma once
// What the parallel golden tests share (tensor_parallel_test, context_parallel_test,
// tensor_parallel_gpu_test): the checkpoints they run, the ranks' pids, an engine's arguments for
// one of them, its golden prompts, greedy sampling with the top 5, whether -tp N splits a shape,
// and the exact comparison of the CPU tests (greedy tokens equal, log-probabilities within a
// tolerance).
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "engine/engine_core.h"
#include "golden_check.h"
#include "model/config.h"
#include "pagoda/engine_args.h"
#include "pagoda/llm.h"

namespace pagoda::golden {

/// stories260K, the tiny golden checkpoints and the family fixtures present.
inline std::vector<std::string> parallel_checkpoint_dirs() {
  std::vector<std::string> dirs = {kSource + "/models/stories260K"};
  for (const char* n : kTinyFixtures) dirs.push_back(kSource + "/tests/data/tiny/" + n);
  for (const char* n : kFamilyFixtures) {
    const std::string dir = kSource + "/tests/data/tiny/" + n;
    if (std::filesystem::exists(dir)) dirs.push_back(dir);
  }
  return dirs;
}

/// One thread per rank, `tp` ranks, the checkpoint's max_model_len from golden.json when given.
inline EngineArgs parallel_args(const std::string& dir, const std::string& device, int tp,
                                int64_t kv_cache_memory_bytes) {
  EngineArgs args;
  args.model = dir;
  args.device = device;
  args.num_threads = 1;
  args.kv_cache_memory_bytes = kv_cache_memory_bytes;
  args.tensor_parallel_size = tp;
  const nlohmann::json golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  if (golden.contains("max_model_len"))
    args.max_model_len = golden.at("max_model_len").get<int64_t>();
  return args;
}

inline std::vector<PromptInput> golden_prompts(const std::string& dir) {
  const nlohmann::json golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  std::vector<PromptInput> prompts;
  for (const nlohmann::json& c : golden.at("cases"))
    prompts.push_back({std::nullopt, c.at("prompt_ids").get<std::vector<int32_t>>()});
  return prompts;
}

/// Greedy, `max_tokens` whatever the end-of-sequence token, the top-5 log-probabilities.
inline SamplingParams greedy_top5(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 5;
  return p;
}

/// Whether -tp tp splits the shape: heads, KV heads (dividing or divisible), the MLP's features,
/// and a vocabulary row per rank.
inline bool tensor_parallel_divides(const ModelConfig& c, int tp) {
  return c.num_heads % tp == 0 && (c.num_kv_heads % tp == 0 || tp % c.num_kv_heads == 0) &&
         c.intermediate_size % tp == 0 && c.vocab_size >= tp;
}

/// Compares `many` ranks' outputs with one rank's: greedy tokens equal, the chosen and top-5
/// log-probabilities within `tolerance` (a token at the edge of the top 5 may swap with a near
/// tie; its log-probability must then be at that edge). Returns the largest difference.
inline double compare_exact(const std::string& name, const std::vector<GenerateResult>& one,
                            const std::vector<GenerateResult>& many, double tolerance) {
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
          EXPECT_NEAR(lp, b.logprobs[t].top.back().second, tolerance)
              << name << " prompt " << i << " step " << t << " token " << token;
          continue;
        }
        worst = std::max(worst, std::abs(double{lp} - it->second));
      }
    }
  }
  EXPECT_LE(worst, tolerance) << name;
  return worst;
}

/// The pids of this process's children (the engine's rank workers), from /proc/<pid>/stat.
inline std::vector<pid_t> child_pids() {
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

/// Kills the last of a two-rank engine's workers after a request that ran: every later request
/// fails naming the rank, its pid and the signal, and so does the engine's fatal error (what
/// `serve` watches: it stops with this message, status 1, and /health answers 503 with it).
inline void expect_a_dead_rank_ends_the_engine(LLM& llm) {
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
  const std::string want = "(pid " + std::to_string(victim) + ") exited, killed by signal 9";
  for (int attempt = 0; attempt < 2; ++attempt) {  // the group stays stopped
    const CompletionOutput out = llm.generate(prompt, p).at(0).outputs.at(0);
    EXPECT_NE(out.error.find("tensor-parallel rank"), std::string::npos) << out.error;
    EXPECT_NE(out.error.find(want), std::string::npos) << out.error;
  }
  EXPECT_NE(llm.engine().fatal_error().find(want), std::string::npos) << llm.engine().fatal_error();
}

}  // namespace pagoda::golden
