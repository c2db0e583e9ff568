// Failure isolation in EngineCore: an error while processing one request fails that request alone.
// EngineArgs::fault_hook makes one chosen request ("victim") throw at a chosen stage of the loop
// (admission, scheduling, sampling, detokenizing, stop checking, emitting), next to 50 healthy
// requests: the victim ends with the error and its blocks are freed, and every healthy request
// gives exactly the tokens of a run without the fault. Also n > 1 with max_tokens 1, whose fork
// once threw in the engine step and aborted every request in flight.
//
// To add a case: add a Fault to kFaults (the stage, on which of the victim's calls to throw, and
// the victim's n).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "pagoda/llm.h"

namespace pagoda {
namespace {

using engine_test::greedy;
using engine_test::small_engine;

constexpr int kHealthy = 50;
constexpr int kVictimMaxTokens = 16;

/// 50 healthy prompts of various lengths and lengths to generate, and the victim's prompt (40
/// tokens: its first two blocks are full, so they enter the prefix cache at its first step).
struct Batch {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
  std::vector<int32_t> victim;
};

Batch make_batch() {
  Batch b;
  for (int i = 0; i < kHealthy; ++i) {
    std::vector<int32_t> p{1};
    for (int j = 0; j < 3 + (i * 7) % 50; ++j) p.push_back(3 + (i * 31 + j * 17) % 500);
    b.prompts.push_back(std::move(p));
    b.max_tokens.push_back(4 + (i * 5) % 21);
  }
  b.victim.push_back(1);
  for (int j = 0; j < 39; ++j) b.victim.push_back(3 + (j * 13) % 500);
  return b;
}

EngineRequest request(std::string id, std::vector<int32_t> prompt, int max_tokens, int n = 1) {
  EngineRequest r;
  r.request_id = std::move(id);
  r.prompt_token_ids = std::move(prompt);
  r.params = greedy(max_tokens);
  r.params.n = n;
  return r;
}

/// Submits the healthy requests with the victim among them; returns the healthy results (in
/// order) and the victim's.
std::pair<std::vector<GenerateResult>, GenerateResult> run(EngineCore& engine, const Batch& b,
                                                           int victim_n) {
  std::vector<std::shared_ptr<OutputStream>> streams;
  std::shared_ptr<OutputStream> victim;
  for (int i = 0; i < kHealthy; ++i) {
    if (i == kHealthy / 2) {
      victim = engine.submit(request("victim", b.victim, kVictimMaxTokens, victim_n));
    }
    streams.push_back(
        engine.submit(request(fmt::format("ok-{}", i), b.prompts[i], b.max_tokens[i])));
  }
  std::vector<GenerateResult> healthy;
  for (auto& s : streams) healthy.push_back(collect_result(*s));
  return {healthy, collect_result(*victim)};
}

struct Fault {
  RequestStage stage;
  int nth;  // the victim's nth call at that stage throws
  int n;    // the victim's n
};

std::string stage_name(RequestStage stage) {
  switch (stage) {
    case RequestStage::kAdmit:
      return "admit";
    case RequestStage::kSchedule:
      return "schedule";
    case RequestStage::kSample:
      return "sample";
    case RequestStage::kDetokenize:
      return "detokenize";
    case RequestStage::kStopCheck:
      return "stop_check";
    case RequestStage::kEmit:
      return "emit";
  }
  return "?";
}

void PrintTo(const Fault& f, std::ostream* os) {
  *os << stage_name(f.stage) << ", call " << f.nth << ", n " << f.n;
}

const Fault kFaults[] = {
    {RequestStage::kAdmit, 1, 1},      {RequestStage::kSchedule, 1, 1},
    {RequestStage::kSchedule, 5, 1},   {RequestStage::kSample, 1, 1},
    {RequestStage::kSample, 4, 1},     {RequestStage::kSample, 3, 2},
    {RequestStage::kDetokenize, 3, 1}, {RequestStage::kStopCheck, 3, 1},
    {RequestStage::kEmit, 3, 1},       {RequestStage::kEmit, 5, 2},
};

class FaultIsolation : public ::testing::TestWithParam<Fault> {
 protected:
  static void SetUpTestSuite() {
    batch_ = new Batch(make_batch());
    reference_ = new std::vector<std::vector<int32_t>>();
    EngineCore clean(small_engine());
    auto [healthy, victim] = run(clean, *batch_, 1);
    for (const GenerateResult& r : healthy) reference_->push_back(r.outputs.at(0).token_ids);
    victim_tokens_ = new std::vector<int32_t>(victim.outputs.at(0).token_ids);
  }
  static void TearDownTestSuite() {
    delete batch_;
    delete reference_;
    delete victim_tokens_;
  }
  static Batch* batch_;
  static std::vector<std::vector<int32_t>>* reference_;
  static std::vector<int32_t>* victim_tokens_;
};
Batch* FaultIsolation::batch_ = nullptr;
std::vector<std::vector<int32_t>>* FaultIsolation::reference_ = nullptr;
std::vector<int32_t>* FaultIsolation::victim_tokens_ = nullptr;

TEST_P(FaultIsolation, FailsTheVictimAloneAndFreesItsBlocks) {
  const Fault fault = GetParam();
  auto calls = std::make_shared<std::atomic<int>>(0);
  EngineArgs args = small_engine();
  args.fault_hook = [fault, calls](RequestStage stage, const std::string& id) {
    if (stage == fault.stage && id == "victim" && ++*calls == fault.nth) {
      throw std::runtime_error("injected fault at " + stage_name(stage));
    }
  };
  EngineCore engine(args);
  auto [healthy, victim] = run(engine, *batch_, fault.n);

  ASSERT_GE(calls->load(), fault.nth) << "the fault was never injected";
  ASSERT_FALSE(victim.outputs.empty());
  for (const CompletionOutput& c : victim.outputs) {
    EXPECT_EQ(c.finish_reason, FinishReason::kAbort);
    EXPECT_NE(c.error.find("injected fault at " + stage_name(fault.stage)), std::string::npos)
        << c.error;
    EXPECT_LT(static_cast<int>(c.token_ids.size()), kVictimMaxTokens);
  }
  ASSERT_EQ(healthy.size(), static_cast<size_t>(kHealthy));
  for (int i = 0; i < kHealthy; ++i) {
    ASSERT_EQ(healthy[i].outputs.size(), 1u) << "request " << i;
    const CompletionOutput& c = healthy[i].outputs[0];
    EXPECT_EQ(c.finish_reason, FinishReason::kLength) << "request " << i << ": " << c.error;
    EXPECT_TRUE(c.error.empty()) << "request " << i << ": " << c.error;
    EXPECT_EQ(c.token_ids, (*reference_)[i]) << "request " << i;
  }
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
  EXPECT_EQ(engine.stats().num_running, 0);

  // The engine serves on, and the victim's prompt (its blocks possibly cached by the failed step)
  // gives the tokens of the clean run.
  const GenerateResult again =
      collect_result(*engine.submit(request("again", batch_->victim, kVictimMaxTokens)));
  ASSERT_EQ(again.outputs.size(), 1u);
  EXPECT_EQ(again.outputs[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(again.outputs[0].token_ids, *victim_tokens_);
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Stages, FaultIsolation, ::testing::ValuesIn(kFaults),
                         [](const ::testing::TestParamInfo<Fault>& info) {
                           return stage_name(info.param.stage) + "_call" +
                                  std::to_string(info.param.nth) + "_n" +
                                  std::to_string(info.param.n);
                         });

// n > 1 with max_tokens 1: the fork's children already hold their one token, so they must finish
// without ever being scheduled (the scheduler refused them, and the engine aborted every request).
TEST(ForkWithOneToken, EveryChoiceFinishesAndOthersAreUntouched) {
  EngineCore engine(small_engine());
  const Batch batch = make_batch();
  std::vector<std::shared_ptr<OutputStream>> healthy;
  std::vector<std::pair<int, std::shared_ptr<OutputStream>>> forks;  // n, stream
  for (int i = 0; i < 8; ++i) {
    healthy.push_back(engine.submit(request(fmt::format("ok-{}", i), batch.prompts[i], 20)));
    for (int n : {2, 3}) {
      EngineRequest r = request(fmt::format("fork-{}-{}", i, n), batch.victim, 1, n);
      r.params.temperature = 1.0;
      r.params.seed = 7 + i;
      forks.emplace_back(n, engine.submit(std::move(r)));
    }
  }
  for (auto& [n, s] : forks) {
    const GenerateResult r = collect_result(*s);
    ASSERT_EQ(r.outputs.size(), static_cast<size_t>(n));
    for (const CompletionOutput& c : r.outputs) {
      EXPECT_EQ(c.finish_reason, FinishReason::kLength) << c.error;
      EXPECT_TRUE(c.error.empty()) << c.error;
      EXPECT_EQ(c.token_ids.size(), 1u);
    }
  }
  for (auto& s : healthy) {
    const GenerateResult r = collect_result(*s);
    ASSERT_EQ(r.outputs.size(), 1u);
    EXPECT_EQ(r.outputs[0].finish_reason, FinishReason::kLength) << r.outputs[0].error;
    EXPECT_EQ(r.outputs[0].token_ids.size(), 20u);
  }
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
}

}  // namespace
}  // namespace pagoda
