// A quantized KV cache against the transformers goldens and against the dense cache, on the CPU.
//
// For each checkpoint (stories260K and every tiny fixture present) and each cache variant, every
// golden case runs twice through the model (golden_check.h's SequenceRunner, prefill then one
// decode step per token, so both attention paths read the quantized cache):
//   - teacher-forced along transformers' greedy tokens: max |log-probability - transformers'| over
//     the golden top-10 of every prompt position and top-5 of every step, bounded per variant
//     (kBounds; the measured figures are in docs/engine.md, "Quantized KV cache");
//   - free-running greedy decoding, compared token for token with the dense (fp32) cache's: the
//     number of prompts whose whole greedy output is equal is printed, and of the others the number
//     where each side's token is in the other's top-5 at the divergence (check_logprobs_close).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "golden_check.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace pagoda {
namespace {

using golden::kSource;
using golden::SequenceRunner;
using nlohmann::json;

struct Variant {
  const char* dtype;     // --kv-cache-dtype
  bool calculate;        // --calculate-kv-scales
  double stories_bound;  // max |dlogprob| against transformers on stories260K
  double tiny_bound;     // ... on the tiny random checkpoints
};

// Bounds 1.5x the largest measured error (docs/engine.md has the figures; the computation is
// deterministic). The dense cache's are 1e-4 and 1e-3.
constexpr Variant kVariants[] = {
    {"fp8", false, 2.9, 4.0},  // fp8_e4m3, scale 1.0 (no scales in these checkpoints)
    {"fp8", true, 3.3, 2.9},   // fp8_e4m3, scales from the first forward
    {"fp8_e5m2", false, 5.5, 5.7}, {"int8", true, 1.9, 6.2}, {"bfloat16", false, 0.12, 0.34},
};

std::vector<std::string> checkpoints() {
  std::vector<std::string> dirs = {kSource + "/models/stories260K"};
  for (const char* name : golden::kTinyFixtures)
    dirs.push_back(kSource + "/tests/data/tiny/" + name);
  for (const char* name : golden::kFamilyFixtures) {
    const std::string dir = kSource + "/tests/data/tiny/" + name;
    if (std::filesystem::exists(dir)) dirs.push_back(dir);
  }
  return dirs;
}

std::unique_ptr<Model> load(const std::string& dir, const std::string& dtype, bool calculate,
                            ThreadPool& pool) {
  LoadOptions options = golden::fixture_load_options(dir);
  options.kv_cache = KVCacheOptions{dtype, calculate};
  return load_model(dir, options, pool);
}

/// Greedy decoding of `steps` tokens after the prompt, with each step's log-probabilities.
struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logprobs;
};
Greedy greedy(Model& model, const std::vector<int32_t>& prompt, size_t steps) {
  SequenceRunner runner(model, static_cast<int64_t>(prompt.size() + steps) + 1, 16);
  std::vector<float> last = runner.append(prompt).back();
  Greedy out;
  for (size_t i = 0; i < steps; ++i) {
    out.tokens.push_back(golden::argmax(last));
    out.logprobs.push_back(last);
    last = runner.append({out.tokens.back()})[0];
  }
  return out;
}

bool in_top5(const std::vector<float>& logprobs, int32_t token) {
  const auto top = top_k_entries(logprobs, 5);
  return std::any_of(top.begin(), top.end(),
                     [&](const TokenLogprob& t) { return t.token == token; });
}

TEST(KVCacheDTypeGolden, QuantizedCacheStaysCloseToTransformersAndTheDenseCache) {
  ThreadPool pool(2);
  for (const Variant& v : kVariants) {
    int prompts = 0, equal = 0, close = 0, stories_prompts = 0, stories_equal = 0;
    double stories_err = 0, tiny_err = 0;
    for (const std::string& dir : checkpoints()) {
      SCOPED_TRACE(dir + " --kv-cache-dtype " + v.dtype);
      const bool stories = dir.find("stories260K") != std::string::npos;
      const json golden = json::parse(read_text_file(dir + "/golden.json"));
      auto dense = load(dir, "auto", false, pool);
      auto quantized = load(dir, v.dtype, v.calculate, pool);
      ASSERT_EQ(dense->kv_cache_spec().bytes_per_token(),
                quantized->kv_cache_spec().bytes_per_token() *
                    (v.dtype == std::string("bfloat16") ? 2 : 4));
      double err = 0;
      for (const json& c : golden.at("cases")) {
        err = std::max(err, golden::teacher_forced_error(*quantized, c, 16));
        const auto prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
        const size_t steps = c.at("greedy_ids").size();
        const Greedy a = greedy(*dense, prompt, steps), b = greedy(*quantized, prompt, steps);
        const size_t first = static_cast<size_t>(
            std::mismatch(a.tokens.begin(), a.tokens.end(), b.tokens.begin()).first -
            a.tokens.begin());
        if (first < steps && in_top5(a.logprobs[first], b.tokens[first]) &&
            in_top5(b.logprobs[first], a.tokens[first])) {
          ++close;  // vLLM's check_logprobs_close holds at the divergence
        }
        ++prompts;
        equal += first == steps ? 1 : 0;
        if (stories) {
          ++stories_prompts;
          stories_equal += first == steps ? 1 : 0;
        }
      }
      EXPECT_LE(err, stories ? v.stories_bound : v.tiny_bound);
      (stories ? stories_err : tiny_err) = std::max(stories ? stories_err : tiny_err, err);
    }
    std::printf(
        "--kv-cache-dtype %s%s: max |dlogprob| vs transformers stories260K %.2e, tiny %.2e; "
        "greedy output equal to the dense cache's on %d of %d prompts (stories260K %d of %d), "
        "each side's token in the other's top-5 where they diverge on %d of %d\n",
        v.dtype, v.calculate ? " --calculate-kv-scales" : "", stories_err, tiny_err, equal, prompts,
        stories_equal, stories_prompts, close, prompts - equal);
  }
}

}  // namespace
}  // namespace pagoda
