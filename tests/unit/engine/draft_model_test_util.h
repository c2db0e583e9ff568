#pragma once
// Helpers of the draft-model tests (draft_model_test.cc, draft_model_sampling_test.cc): engines
// with a draft model, a deliberately different draft (stories260K's weights perturbed, written to
// a temporary directory once per process), runs of requests alone, and output comparisons.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "chi_square_test_util.h"
#include "engine_test_util.h"

namespace pagoda::draft_test {

/// A fresh directory under the test's temporary directory (the process id keeps runs apart).
inline std::string temp_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("pagoda_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

/// stories260K with every weight w replaced by w (1 + 0.15 n), n uniform in [-1, 1) from a fixed
/// seed: the same shapes and vocabulary, a different distribution (drafts often rejected).
inline const std::string& perturbed_stories() {
  static const std::string dir = [] {
    const std::string out = temp_dir("perturbed_stories");
    for (const char* f :
         {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
      std::filesystem::copy_file(engine_test::kStories + "/" + f, out + "/" + f);
    }
    std::ifstream in(engine_test::kStories + "/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    uint64_t header = 0;
    std::memcpy(&header, bytes.data(), sizeof(header));
    // Every tensor of stories260K is F32: the data after the header is floats.
    const size_t begin = 8 + header;
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> noise(-1.0f, 1.0f);
    for (size_t at = begin; at + 4 <= bytes.size(); at += 4) {
      float w = 0;
      std::memcpy(&w, bytes.data() + at, 4);
      w *= 1.0f + 0.15f * noise(rng);
      std::memcpy(bytes.data() + at, &w, 4);
    }
    std::ofstream(out + "/model.safetensors", std::ios::binary) << bytes;
    return out;
  }();
  return dir;
}

/// `args` speculating with `method` (draft_model, eagle, eagle3, parallel_draft) from `model`.
inline EngineArgs speculating(EngineArgs args, const std::string& method, const std::string& model,
                              int k, bool adaptive) {
  SpeculativeConfig c;
  c.method = method;
  c.model = model;
  c.num_speculative_tokens = k;
  c.adaptive = adaptive;
  args.speculative_config = c;
  return args;
}

/// stories260K speculating with `draft` as its draft model.
inline EngineArgs draft_engine(const std::string& draft, int k, bool adaptive) {
  return speculating(engine_test::small_engine(512), "draft_model", draft, k, adaptive);
}

inline EngineRequest text_request(const std::string& text, const SamplingParams& p) {
  EngineRequest r;
  r.prompt = text;
  r.params = p;
  return r;
}

/// The two-sample test of a speculating engine's sampled tokens against plain sampling (the
/// draft-model and EAGLE sampling tests, CPU and GPU): `requests` requests of `prompt` with `p`
/// (max_tokens `tokens`) on each engine, disjoint seeds (the plain engine's from 100,000), and per
/// output position 1.. (token 0 is drawn before any draft) a chi-square test at significance 0.001.
/// Returns the speculating engine's stats for the caller's checks on its drafts.
inline EngineStats expect_same_token_distribution(const EngineArgs& speculating,
                                                  const EngineArgs& plain,
                                                  const std::string& prompt, SamplingParams p,
                                                  int requests, int tokens) {
  std::vector<std::vector<std::map<int32_t, int>>> counts(
      2, std::vector<std::map<int32_t, int>>(static_cast<size_t>(tokens)));
  EngineStats stats;
  for (int spec = 0; spec < 2; ++spec) {
    EngineCore engine(spec == 1 ? speculating : plain);
    std::vector<std::shared_ptr<OutputStream>> streams;
    p.max_tokens = tokens;
    for (int i = 0; i < requests; ++i) {
      p.seed = static_cast<uint64_t>(i + (spec == 1 ? 0 : 100000));
      streams.push_back(engine.submit(text_request(prompt, p)));
    }
    for (auto& s : streams) {
      const std::vector<int32_t> t = collect_result(*s).outputs.at(0).token_ids;
      EXPECT_EQ(t.size(), static_cast<size_t>(tokens));
      for (size_t j = 0; j < t.size() && j < static_cast<size_t>(tokens); ++j)
        ++counts[static_cast<size_t>(spec)][j][t[j]];
    }
    if (spec == 1) stats = engine.stats();
  }
  for (int j = 1; j < tokens; ++j) {
    const auto [stat, df] =
        chi_square(counts[1][static_cast<size_t>(j)], counts[0][static_cast<size_t>(j)]);
    const double critical = chi_square_critical_001(df);
    std::printf("  token %d: chi-square %.1f, %d degrees of freedom, critical %.1f\n", j, stat, df,
                critical);
    EXPECT_LT(stat, critical) << "token " << j;
  }
  return stats;
}

}  // namespace pagoda::draft_test
