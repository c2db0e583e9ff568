// The step contract on a real model: a step that computes 1 + k tokens of a sequence (speculative
// verification) returns the same logits rows and hidden states as k + 1 steps of one token each
// (bit-identical on the CPU; the GPU variant in model_runner_gpu_test.cc holds them to the GPU
// tolerance), block tables travel as changes, and a bad plan fails before it runs.
//
// To add a case: give run_split/run_whole another prompt or another k in kCases.
#include "runtime/model_runner.h"

#include <gtest/gtest.h>

#include <numeric>

#include "model_runner_test_util.h"

namespace pagoda {
namespace {

using runner_test::Case;
using runner_test::kCases;

TEST(ModelRunner, MultiTokenStepsEqualSingleStepsBitForBit) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto model = load_model(runner_test::model_dir(c), LoadOptions{}, pool);
    const runner_test::Outputs whole = runner_test::run(*model, c, /*split=*/false);
    auto fresh = load_model(runner_test::model_dir(c), LoadOptions{}, pool);
    const runner_test::Outputs split = runner_test::run(*fresh, c, /*split=*/true);
    ASSERT_EQ(whole.logits.size(), split.logits.size());
    ASSERT_EQ(whole.hidden.size(), split.hidden.size());
    for (size_t i = 0; i < whole.logits.size(); ++i) {
      ASSERT_EQ(whole.logits[i], split.logits[i]) << "logit " << i;  // bitwise on the CPU
    }
    for (size_t i = 0; i < whole.hidden.size(); ++i) {
      ASSERT_EQ(whole.hidden[i], split.hidden[i]) << "hidden " << i;
    }
  }
}

TEST(ModelRunner, BlockTablesTravelAsChanges) {
  ThreadPool pool(2);
  auto model = load_model(runner_test::model_dir(kCases[0]), LoadOptions{}, pool);
  model->init_kv_cache(16, 4);
  ModelRunner runner(*model, 4);
  StepPlan plan;
  PlannedSequence s;
  s.id = 7;
  s.tokens = {1, 20, 30, 40, 50};
  s.new_blocks = {3, 5};
  s.rows.resize(1);
  plan.seqs.push_back(s);
  (void)runner.execute(std::move(plan));
  EXPECT_EQ(std::vector<int32_t>(runner.block_table(7).begin(), runner.block_table(7).end()),
            std::vector<int32_t>({3, 5}));
  // Keep the first block, replace the rest.
  StepPlan next;
  s.num_computed = 5;
  s.tokens = {60};
  s.block_table_start = 1;
  s.new_blocks = {9};
  next.seqs.push_back(s);
  (void)runner.execute(std::move(next));
  EXPECT_EQ(std::vector<int32_t>(runner.block_table(7).begin(), runner.block_table(7).end()),
            std::vector<int32_t>({3, 9}));
  StepPlan forget;
  forget.finished = {7};
  (void)runner.execute(std::move(forget));
  EXPECT_TRUE(runner.block_table(7).empty());
}

TEST(ModelRunner, BadPlansFailBeforeRunning) {
  ThreadPool pool(2);
  auto model = load_model(runner_test::model_dir(kCases[0]), LoadOptions{}, pool);
  model->init_kv_cache(16, 4);
  ModelRunner runner(*model, 4);
  auto plan_of = [](PlannedSequence s) {
    StepPlan p;
    p.seqs.push_back(std::move(s));
    return p;
  };
  PlannedSequence too_few_blocks;
  too_few_blocks.id = 1;
  too_few_blocks.tokens = {1, 2, 3, 4, 5};
  too_few_blocks.new_blocks = {2};  // 4 slots for 5 tokens
  EXPECT_THROW((void)runner.execute(plan_of(too_few_blocks)), Error);
  EXPECT_FALSE(runner.in_flight());
  PlannedSequence rows_past_tokens;
  rows_past_tokens.id = 2;
  rows_past_tokens.tokens = {1};
  rows_past_tokens.new_blocks = {2};
  rows_past_tokens.rows.resize(2);
  EXPECT_THROW((void)runner.execute(plan_of(rows_past_tokens)), Error);
  PlannedSequence unknown_start;
  unknown_start.id = 3;
  unknown_start.tokens = {1};
  unknown_start.block_table_start = 2;  // the runner holds no table for 3
  unknown_start.new_blocks = {2};
  EXPECT_THROW((void)runner.execute(plan_of(unknown_start)), Error);
  EXPECT_TRUE(runner.block_table(1).empty());
}

}  // namespace
}  // namespace pagoda
