// Batch invariance on the CPU: a greedy request alone and the same request inside a continuous
// batch (any other requests, any chunk budget, prefix caching on or off, preempted and recomputed,
// on another number of threads) give the same tokens and bit-identical log-probabilities (the
// sampled token's and the top 5), compared with memcmp, not a tolerance. docs/engine.md, "Batch
// invariance on the CPU", states the guarantee.
//
// Models: stories260K (f32 weights); tiny checkpoints for bf16 weights, sliding windows with logit
// soft-capping (Gemma-2) and head dim 128; and a dummy-weight bf16 model of wider shapes
// (hidden 512, an intermediate size with a k tail) whose products take oneDNN-sized m. To add a
// model: a ModelCase in kModels. To add a batching scenario: a case in the Scenarios test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/status.h"
#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "pagoda/llm.h"

namespace pagoda {
namespace {

using engine_test::greedy;
using engine_test::make_workload;
using engine_test::run_alone;
using engine_test::run_batched_outputs;
using engine_test::small_engine;
using engine_test::Workload;

constexpr int kTopLogprobs = 5;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

/// Tokens equal, and every log-probability (the token's and its top entries') the same bits.
/// Returns the number of positions that differ (for the failure message).
int count_differences(const CompletionOutput& ref, const CompletionOutput& got, double& max_diff) {
  int differing = 0;
  if (ref.token_ids != got.token_ids || ref.logprobs.size() != got.logprobs.size()) return -1;
  for (size_t i = 0; i < ref.logprobs.size(); ++i) {
    const TokenLogprobs& a = ref.logprobs[i];
    const TokenLogprobs& b = got.logprobs[i];
    bool same =
        a.token == b.token && same_bits(a.logprob, b.logprob) && a.top.size() == b.top.size();
    max_diff = std::max<double>(max_diff, std::abs(a.logprob - b.logprob));
    for (size_t j = 0; same && j < a.top.size(); ++j)
      same = a.top[j].first == b.top[j].first && same_bits(a.top[j].second, b.top[j].second);
    differing += !same;
  }
  return differing;
}

void expect_bit_identical(const std::vector<CompletionOutput>& ref,
                          const std::vector<CompletionOutput>& got, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  int requests = 0, positions = 0, total = 0;
  double max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(ref[i].logprobs.size(), ref[i].token_ids.size()) << what;
    total += static_cast<int>(ref[i].token_ids.size());
    const int d = count_differences(ref[i], got[i], max_diff);
    EXPECT_GE(d, 0) << what << ": request " << i << " has other tokens";
    requests += d != 0;
    positions += std::max(d, 0);
  }
  EXPECT_EQ(requests, 0) << what << ": " << requests << " requests, " << positions << " of "
                         << total << " positions differ in log-probability bits (max " << max_diff
                         << ")";
}

/// FNV-1a over every token id and log-probability bit pattern of a workload's completions,
/// printed so that two builds (PAGODA_ONEDNN on and off) or machines can be compared by eye.
uint64_t fingerprint(const std::vector<CompletionOutput>& outputs) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
      h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  };
  for (const CompletionOutput& c : outputs) {
    for (const TokenLogprobs& t : c.logprobs) {
      mix(&t.token, sizeof t.token);
      mix(&t.logprob, sizeof t.logprob);
      for (const auto& [id, lp] : t.top) {
        mix(&id, sizeof id);
        mix(&lp, sizeof lp);
      }
    }
  }
  return h;
}

struct Scenario {
  int budget;  // max_num_batched_tokens: 16 chunks most prompts, 512 takes many whole
  bool prefix_caching;
};

struct ModelCase {
  std::string name;
  std::string dir;  // a checkpoint, or a config.json for dummy weights
  bool dummy = false;
  size_t requests = 64;  // the first this many of the workload (the larger models take fewer)
  std::vector<Scenario> scenarios = {{16, true},  {16, false}, {64, true},
                                     {64, false}, {512, true}, {512, false}};
};
void PrintTo(const ModelCase& m, std::ostream* os) { *os << m.name; }

/// A Llama of wider shapes than the tiny checkpoints (k up to 1400, not a multiple of 32), for
/// dummy bf16 weights.
std::string wide_dummy_model() {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "pagoda_wide_dummy_llama";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
    "intermediate_size": 1400, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 2048, "rms_norm_eps": 1e-5,
    "max_position_embeddings": 1024, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
    "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})";
  return dir.string();
}

const std::string kTiny = std::string(PAGODA_SOURCE_DIR) + "/tests/data/tiny/";

std::vector<ModelCase> models() {
  return {{"stories260K", engine_test::kStories},
          {"llama_bf16", kTiny + "llama-bf16"},
          {"gemma2_sliding_window_softcap",
           kTiny + "gemma2-hd64-softcap",
           false,
           64,
           {{16, true}, {64, false}, {512, true}}},
          {"mistral_hd128_bf16",
           kTiny + "mistral-hd128-bf16",
           false,
           64,
           {{16, false}, {64, true}, {512, false}}},
          {"wide_dummy_bf16", "", true, 24, {{16, true}, {512, false}}}};
}

EngineArgs engine_for(const ModelCase& m, int budget, bool caching, int64_t kv_bytes = 64 << 20) {
  EngineArgs args =
      small_engine(budget, caching, kv_bytes, "cpu", m.dummy ? wide_dummy_model() : m.dir);
  if (m.dummy) args.load_format = "dummy";
  return args;
}

class BatchInvariance : public ::testing::TestWithParam<ModelCase> {};

TEST_P(BatchInvariance, LogprobBitsAloneAndInBatchesChunkedAndPrefixCached) {
  const ModelCase& m = GetParam();
  Workload w = make_workload(11);
  w.prompts.resize(m.requests);
  w.max_tokens.resize(m.requests);
  // The reference: each request alone, one after the other, its prompt in one step, on one
  // thread (the batches run on two).
  std::vector<CompletionOutput> reference;
  {
    EngineArgs args = engine_for(m, 2048, false);
    args.num_threads = 1;
    EngineCore engine(args);
    reference = run_alone(engine, w, kTopLogprobs);
  }
  std::printf("%s: log-probability fingerprint %016llx\n", m.name.c_str(),
              static_cast<unsigned long long>(fingerprint(reference)));
  for (const auto [budget, caching] : m.scenarios) {
    const std::string what =
        fmt::format("{}: budget {}, prefix caching {}", m.name, budget, caching);
    EngineCore engine(engine_for(m, budget, caching));
    expect_bit_identical(
        reference,
        run_batched_outputs(engine, w, static_cast<uint32_t>(budget) + caching, kTopLogprobs),
        what);
    const EngineStats s = engine.stats();
    if (caching) {
      EXPECT_GT(s.prefix_cache_hits_tokens, 0) << what;
    } else {
      EXPECT_EQ(s.prefix_cache_hits_tokens, 0) << what;
    }
    EXPECT_EQ(s.kv_cache_usage, 0.0) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, BatchInvariance, ::testing::ValuesIn(models()),
                         [](const auto& info) { return info.param.name; });

TEST(BatchInvarianceStories, UnderPreemption) {
  const Workload w = make_workload(11);
  std::vector<CompletionOutput> reference;
  {
    EngineCore engine(small_engine(2048, false));
    reference = run_alone(engine, w, kTopLogprobs);
  }
  // 9 usable blocks of 16 = 144 tokens: one request of the longest length (141 tokens) fits, many
  // do not, so requests are preempted and recomputed.
  EngineArgs args = small_engine(64, true, 10 * 16 * 1280);
  args.max_model_len = 144;
  EngineCore engine(args);
  expect_bit_identical(reference, run_batched_outputs(engine, w, 5, kTopLogprobs), "preempted");
  EXPECT_GT(engine.stats().num_preemptions, 0);
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
}

TEST(BatchInvarianceStories, OnednnKeepsTheTokensAndRefusesOtherModes) {
  // --cpu-matmul onednn gives up bit-identity (a row's last bits depend on the batch, which a
  // build without oneDNN does not have) but not the tokens on this workload.
  const Workload w = make_workload(11);
  EngineArgs args = small_engine(2048, false);
  args.cpu_matmul = "onednn";
  std::vector<CompletionOutput> reference;
  {
    EngineCore engine(args);
    reference = run_alone(engine, w);
  }
  args.max_num_batched_tokens = 64;
  EngineCore engine(args);
  const auto out = run_batched_outputs(engine, w, 3);
  for (size_t i = 0; i < out.size(); ++i)
    EXPECT_EQ(out[i].token_ids, reference[i].token_ids) << "request " << i;
  args.cpu_matmul = "fast";
  EXPECT_THROW(EngineCore{args}, InvalidArgument);
}

TEST(BatchInvarianceStories, PromptLogprobsWhateverTheChunking) {
  // Prompt log-probabilities come from prefill rows, which a small budget splits over steps.
  const Workload w = make_workload(12);
  auto run = [&](int budget) {
    EngineCore engine(small_engine(budget, false));
    std::vector<std::shared_ptr<OutputStream>> streams;
    for (size_t i = 0; i < 16; ++i) {
      EngineRequest r;
      r.prompt_token_ids = w.prompts[i];
      r.params = greedy(4, kTopLogprobs);
      r.params.prompt_logprobs = kTopLogprobs;
      streams.push_back(engine.submit(std::move(r)));
    }
    std::vector<GenerateResult> out;
    for (auto& s : streams) out.push_back(collect_result(*s));
    return out;
  };
  const auto whole = run(2048), chunked = run(7);
  for (size_t i = 0; i < whole.size(); ++i) {
    ASSERT_EQ(whole[i].prompt_logprobs.size(), chunked[i].prompt_logprobs.size());
    for (size_t p = 0; p < whole[i].prompt_logprobs.size(); ++p) {
      const auto& a = whole[i].prompt_logprobs[p];
      const auto& b = chunked[i].prompt_logprobs[p];
      ASSERT_EQ(a.has_value(), b.has_value());
      if (!a) continue;
      EXPECT_TRUE(same_bits(a->logprob, b->logprob)) << "request " << i << " position " << p;
      ASSERT_EQ(a->top.size(), b->top.size());
      for (size_t j = 0; j < a->top.size(); ++j) {
        EXPECT_EQ(a->top[j].first, b->top[j].first);
        EXPECT_TRUE(same_bits(a->top[j].second, b->top[j].second));
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
