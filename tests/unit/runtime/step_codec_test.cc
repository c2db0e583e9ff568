// The byte form of StepPlan / StepResult (runtime/step_codec.h): every field survives the trip,
// and a truncated message throws instead of decoding garbage.
#include "runtime/step_codec.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

StepPlan sample_plan() {
  StepPlan plan;
  PlannedSequence s;
  s.id = 42;
  s.num_computed = 17;
  s.tokens = {5, 6, 7, 8};
  s.num_spec = 3;
  s.block_table_start = 2;
  s.new_blocks = {9, 11};
  RowDraw d;
  d.temperature = 0.7f;
  d.seed = 1234567890123ull;
  d.counter = 99;
  d.top_k = 40;
  d.top_p = 0.9f;
  d.min_p = 0.05f;
  d.repetition_penalty = 1.1f;
  d.presence_penalty = 0.2f;
  d.frequency_penalty = -0.3f;
  d.num_logprobs = 5;
  d.penalty_tokens = {{3, 2, 1}, {4, 0, 1}};
  d.logit_bias = {{7, -100.0f}, {8, 2.5f}};
  d.masked = {1, 2};
  s.rows = {d, RowDraw{}};
  plan.seqs.push_back(s);
  s.id = 43;
  s.rows.clear();
  plan.seqs.push_back(s);
  plan.block_copies = {{1, 2}, {3, 4}};
  plan.finished = {7, 8};
  plan.hidden_layers = {-1, 3};
  return plan;
}

TEST(StepCodec, PlansSurviveTheTrip) {
  const StepPlan plan = sample_plan();
  codec::Writer w;
  codec::write_plan(w, plan);
  codec::Reader r(w.bytes().data(), w.bytes().size());
  const StepPlan back = codec::read_plan(r);
  EXPECT_TRUE(r.done());
  ASSERT_EQ(back.seqs.size(), 2u);
  const PlannedSequence& s = back.seqs[0];
  EXPECT_EQ(s.id, 42u);
  EXPECT_EQ(s.num_computed, 17);
  EXPECT_EQ(s.tokens, plan.seqs[0].tokens);
  EXPECT_EQ(s.num_spec, 3);
  EXPECT_EQ(s.block_table_start, 2);
  EXPECT_EQ(s.new_blocks, plan.seqs[0].new_blocks);
  ASSERT_EQ(s.rows.size(), 2u);
  const RowDraw& d = s.rows[0];
  EXPECT_EQ(d.temperature, 0.7f);
  EXPECT_EQ(d.seed, 1234567890123ull);
  EXPECT_EQ(d.counter, 99u);
  EXPECT_EQ(d.top_k, 40);
  EXPECT_EQ(d.top_p, 0.9f);
  EXPECT_EQ(d.min_p, 0.05f);
  EXPECT_EQ(d.repetition_penalty, 1.1f);
  EXPECT_EQ(d.presence_penalty, 0.2f);
  EXPECT_EQ(d.frequency_penalty, -0.3f);
  EXPECT_EQ(d.num_logprobs, 5);
  ASSERT_EQ(d.penalty_tokens.size(), 2u);
  EXPECT_EQ(d.penalty_tokens[0].token, 3);
  EXPECT_EQ(d.penalty_tokens[0].output_count, 2);
  EXPECT_EQ(d.penalty_tokens[1].in_prompt, 1);
  EXPECT_EQ(d.logit_bias, plan.seqs[0].rows[0].logit_bias);
  EXPECT_EQ(d.masked, plan.seqs[0].rows[0].masked);
  EXPECT_EQ(s.rows[1].temperature, -1.0f);
  EXPECT_TRUE(back.seqs[1].rows.empty());
  EXPECT_EQ(back.block_copies, plan.block_copies);
  EXPECT_EQ(back.finished, plan.finished);
  EXPECT_EQ(back.hidden_layers, plan.hidden_layers);
}

TEST(StepCodec, ResultsSurviveTheTripWithoutTheirSpans) {
  std::vector<float> logits(3 * 10, 1.0f);
  StepResult result;
  result.vocab = 10;
  result.logits = logits;
  SequenceResult s;
  s.first_row = 1;
  s.tokens = {4, -1};
  s.logprobs.resize(2);
  s.logprobs[0].logprob = -0.5f;
  s.logprobs[0].top = {{4, -0.5f}, {2, -1.5f}};
  result.seqs = {s};
  codec::Writer w;
  codec::write_result(w, result);
  codec::Reader r(w.bytes().data(), w.bytes().size());
  const codec::ResultHeader h = codec::read_result(r);
  EXPECT_EQ(h.logits_elems, 30u);
  EXPECT_EQ(h.hidden_elems, 0u);
  EXPECT_EQ(h.result.vocab, 10);
  ASSERT_EQ(h.result.seqs.size(), 1u);
  EXPECT_EQ(h.result.seqs[0].first_row, 1);
  EXPECT_EQ(h.result.seqs[0].tokens, s.tokens);
  EXPECT_EQ(h.result.seqs[0].logprobs[0].logprob, -0.5f);
  EXPECT_EQ(h.result.seqs[0].logprobs[0].top, s.logprobs[0].top);
}

TEST(StepCodec, TruncatedMessagesThrow) {
  codec::Writer w;
  codec::write_plan(w, sample_plan());
  const std::string& bytes = w.bytes();
  for (size_t cut : {size_t{0}, size_t{5}, bytes.size() / 2, bytes.size() - 1}) {
    codec::Reader r(bytes.data(), cut);
    EXPECT_THROW((void)codec::read_plan(r), Error) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace pagoda
