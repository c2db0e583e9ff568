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

/// stories260K speculating with `draft` as its draft model.
inline EngineArgs draft_engine(const std::string& draft, int k, bool adaptive) {
  EngineArgs args = engine_test::small_engine(512);
  SpeculativeConfig c;
  c.method = "draft_model";
  c.model = draft;
  c.num_speculative_tokens = k;
  c.adaptive = adaptive;
  args.speculative_config = c;
  return args;
}

inline EngineRequest text_request(const std::string& text, const SamplingParams& p) {
  EngineRequest r;
  r.prompt = text;
  r.params = p;
  return r;
}

}  // namespace pagoda::draft_test
