// The engine over its executors and multi-token steps, on the CPU:
//  - the worker-process executor (--distributed-executor-backend mp) gives the same tokens and
//    the same log-probabilities, bit for bit, as the in-process one;
//  - speculative drafts (EngineArgs::speculative_proposer) leave greedy outputs unchanged, whether
//    the drafts are right (fewer steps) or wrong, and with prompt log-probabilities and stop
//    strings in the mix.
#include <gtest/gtest.h>

#include <map>

#include "core/status.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using engine_test::greedy;
using engine_test::make_workload;
using engine_test::small_engine;

/// Every request of the workload with top-3 log-probabilities, submitted at once.
std::vector<CompletionOutput> run_all(EngineCore& engine, const engine_test::Workload& w) {
  std::vector<std::shared_ptr<OutputStream>> streams;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    EngineRequest r;
    r.prompt_token_ids = w.prompts[i];
    r.params = greedy(w.max_tokens[i], 3);
    streams.push_back(engine.submit(std::move(r)));
  }
  std::vector<CompletionOutput> out;
  for (auto& s : streams) out.push_back(collect_result(*s).outputs.at(0));
  return out;
}

void expect_same(const std::vector<CompletionOutput>& a, const std::vector<CompletionOutput>& b,
                 bool logprobs_bitwise) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].token_ids, b[i].token_ids) << "request " << i;
    if (!logprobs_bitwise) continue;
    ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size());
    for (size_t t = 0; t < a[i].logprobs.size(); ++t) {
      EXPECT_EQ(a[i].logprobs[t].logprob, b[i].logprobs[t].logprob) << i << " token " << t;
      EXPECT_EQ(a[i].logprobs[t].top, b[i].logprobs[t].top) << i << " token " << t;
    }
  }
}

TEST(EngineExecutor, WorkerProcessGivesIdenticalOutputs) {
  // Requests one at a time give both runs the same batches (the CPU's log-probabilities depend on
  // the batch in their last bits), so everything must match bit for bit; all at once, the tokens.
  engine_test::Workload w = make_workload(11);
  w.prompts.resize(12);
  w.max_tokens.resize(12);
  std::vector<CompletionOutput> alone[2], together[2];
  for (int mp = 0; mp < 2; ++mp) {
    EngineArgs args = small_engine(256);
    if (mp == 1) args.distributed_executor_backend = "mp";
    EngineCore engine(args);
    alone[mp] = engine_test::run_alone(engine, w, 3);
    together[mp] = run_all(engine, make_workload(12));
    EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
  }
  expect_same(alone[0], alone[1], /*logprobs_bitwise=*/true);
  expect_same(together[0], together[1], /*logprobs_bitwise=*/false);
}

TEST(EngineExecutor, WorkerLoadErrorsComeBackWithTheirMessage) {
  EngineArgs args = small_engine();
  args.model = std::string(PAGODA_SOURCE_DIR) + "/no/such/model";
  args.distributed_executor_backend = "mp";
  EXPECT_THROW({ EngineCore engine(args); }, NotFound);
  args.model = engine_test::kStories;
  args.distributed_executor_backend = "ray";
  try {
    EngineCore engine(args);
    ADD_FAILURE() << "ray accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--distributed-executor-backend"), std::string::npos);
  }
}

/// The greedy continuations of the workload's prompts, for an oracle proposer.
std::map<std::vector<int32_t>, std::vector<int32_t>> greedy_references(
    const engine_test::Workload& w, const std::vector<CompletionOutput>& outputs) {
  std::map<std::vector<int32_t>, std::vector<int32_t>> refs;
  for (size_t i = 0; i < w.prompts.size(); ++i) refs[w.prompts[i]] = outputs[i].token_ids;
  return refs;
}

TEST(EngineExecutor, SpeculativeDraftsLeaveGreedyOutputsUnchanged) {
  const engine_test::Workload w = make_workload(5);
  std::vector<CompletionOutput> plain;
  int64_t plain_steps = 0;
  {
    EngineCore engine(small_engine(512));
    plain = run_all(engine, w);
    plain_steps = engine.stats().num_steps;
  }
  const auto refs = greedy_references(w, plain);
  // Right drafts: the next 4 tokens of the reference continuation (found by the prompt prefix).
  auto oracle = [&refs](std::span<const int32_t> tokens) {
    for (const auto& [prompt, out] : refs) {
      if (tokens.size() < prompt.size() ||
          !std::equal(prompt.begin(), prompt.end(), tokens.begin()))
        continue;
      const size_t done = tokens.size() - prompt.size();
      if (!std::equal(out.begin(),
                      out.begin() + static_cast<std::ptrdiff_t>(std::min(done, out.size())),
                      tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size())))
        continue;
      std::vector<int32_t> next;
      for (size_t j = done; j < out.size() && next.size() < 4; ++j) next.push_back(out[j]);
      return next;
    }
    return std::vector<int32_t>{};
  };
  // Wrong drafts: tokens nobody predicts, so every step keeps only the sampled token.
  auto wrong = [](std::span<const int32_t> tokens) {
    return std::vector<int32_t>{static_cast<int32_t>((tokens.back() + 7) % 500 + 3), 4, 5};
  };
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant == 0 ? "right drafts" : "wrong drafts");
    EngineArgs args = small_engine(512);
    args.num_speculative_tokens = 4;
    if (variant == 0) {
      args.speculative_proposer = oracle;
    } else {
      args.speculative_proposer = wrong;
    }
    EngineCore engine(args);
    const std::vector<CompletionOutput> spec = run_all(engine, w);
    // Tokens are identical; log-probabilities come from multi-token rows, equal to within the
    // CPU's summation-order noise (the runner test pins rows bit for bit; a BLAS product of more
    // rows may order its sums differently).
    expect_same(plain, spec, /*logprobs_bitwise=*/false);
    for (size_t i = 0; i < plain.size(); ++i) {
      for (size_t t = 0; t < plain[i].logprobs.size(); ++t)
        EXPECT_NEAR(plain[i].logprobs[t].logprob, spec[i].logprobs[t].logprob, 1e-4);
    }
    if (variant == 0) {
      EXPECT_LT(engine.stats().num_steps, plain_steps);
    }
    EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
  }
}

}  // namespace
}  // namespace pagoda
