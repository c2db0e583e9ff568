// DrawInputs: the sparse processor lists of GPU draws, built incrementally, against a from-scratch
// count of the history. To add a case: build params + history, compare the entries with
// expected().
#include "engine/draw_inputs.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace pagoda {
namespace {

using Entries = std::map<int32_t, std::pair<int, int>>;  // token -> (output count, in prompt)

Entries expected(const SamplingParams& p, const std::vector<int32_t>& prompt,
                 const std::vector<int32_t>& output) {
  Entries e;
  if (p.repetition_penalty != 1.0f) {
    for (int32_t t : prompt) e[t].second = 1;
  }
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (int32_t t : output) ++e[t].first;
  }
  return e;
}

Entries entries(std::span<const DrawPenaltyToken> list) {
  Entries e;
  for (const DrawPenaltyToken& t : list) {
    EXPECT_EQ(e.count(t.token), 0u) << "token " << t.token << " twice";
    e[t.token] = {t.output_count, t.in_prompt};
  }
  return e;
}

TEST(DrawInputs, IncrementalCountsMatchTheHistory) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, 30);
  for (int variant = 0; variant < 4; ++variant) {
    SamplingParams p;
    p.repetition_penalty = variant == 0 || variant == 3 ? 1.2f : 1.0f;
    p.presence_penalty = variant == 1 || variant == 3 ? 0.5f : 0.0f;
    p.frequency_penalty = variant == 2 ? 0.3f : 0.0f;
    std::vector<int32_t> prompt, output;
    for (int i = 0; i < 50; ++i) prompt.push_back(tok(rng));
    DrawInputs inputs(p, prompt, std::vector<int32_t>{2});
    for (int step = 0; step < 40; ++step) {
      const DeviceDraw d = inputs.draw(p, 7, output);
      EXPECT_EQ(d.counter, output.size());
      EXPECT_EQ(entries(d.penalty_tokens), expected(p, prompt, output)) << variant << " " << step;
      const int n = 1 + step % 3;  // a step may add more than one token
      for (int i = 0; i < n; ++i) output.push_back(tok(rng));
    }
  }
}

TEST(DrawInputs, ParametersBiasAndMinTokensMask) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 7;
  p.top_p = 0.9f;
  p.min_p = 0.1f;
  p.logit_bias = {{3, 1.5f}, {9, -2.0f}};
  p.min_tokens = 2;
  p.stop_token_ids = {11};
  p.logprobs = 4;
  DrawInputs inputs(p, std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{0, 5});
  std::vector<int32_t> output;
  DeviceDraw d = inputs.draw(p, 42, output);
  EXPECT_EQ(d.temperature, 0.8f);
  EXPECT_EQ(d.seed, 42u);
  EXPECT_EQ(d.top_k, 7);
  EXPECT_EQ(d.num_logprobs, 4);
  EXPECT_TRUE(d.penalty_tokens.empty());
  ASSERT_EQ(d.logit_bias.size(), 2u);
  EXPECT_EQ(d.logit_bias[1], (std::pair<int32_t, float>{9, -2.0f}));
  EXPECT_EQ(std::vector<int32_t>(d.masked.begin(), d.masked.end()),
            (std::vector<int32_t>{0, 5, 11}));
  output = {4, 4};
  d = inputs.draw(p, 42, output);
  EXPECT_TRUE(d.masked.empty()) << "min_tokens reached";
  p.ignore_eos = true;
  p.temperature = 0.0f;
  DrawInputs ignoring(p, {}, std::vector<int32_t>{0});
  d = ignoring.draw(p, 1, {});
  EXPECT_EQ(d.temperature, 0.0f);
  EXPECT_EQ(std::vector<int32_t>(d.masked.begin(), d.masked.end()), (std::vector<int32_t>{11}));
}

TEST(DrawInputs, BadWordsBanTheirLastTokenAfterTheRest) {
  SamplingParams p;
  p.min_tokens = 1;
  p.bad_words_token_ids = {{7}, {3, 2}};
  DrawInputs inputs(p, std::vector<int32_t>{1}, std::vector<int32_t>{0});
  std::vector<int32_t> output;
  DeviceDraw d = inputs.draw(p, 1, output);
  EXPECT_EQ(std::vector<int32_t>(d.masked.begin(), d.masked.end()), (std::vector<int32_t>{0, 7}));
  output = {3};
  d = inputs.draw(p, 1, output);
  EXPECT_EQ(std::vector<int32_t>(d.masked.begin(), d.masked.end()), (std::vector<int32_t>{7, 2}));
  output = {3, 4};
  d = inputs.draw(p, 1, output);
  EXPECT_EQ(std::vector<int32_t>(d.masked.begin(), d.masked.end()), (std::vector<int32_t>{7}));
}

TEST(DrawInputs, AllowedTokenIdsMaskEveryOtherToken) {
  SamplingParams p;
  p.allowed_token_ids = std::vector<int32_t>{2, 5};
  DrawInputs inputs(p, std::vector<int32_t>{1}, std::vector<int32_t>{0}, /*vocab_size=*/8);
  DeviceDraw d = inputs.draw(p, 1, {});
  EXPECT_EQ(std::vector<int32_t>(d.masked.begin(), d.masked.end()),
            (std::vector<int32_t>{0, 1, 3, 4, 6, 7}));
  // With bad words too: both masks.
  p.bad_words_token_ids = {{5}};
  DrawInputs both(p, std::vector<int32_t>{1}, std::vector<int32_t>{0}, 8);
  d = both.draw(p, 1, {});
  EXPECT_EQ(std::vector<int32_t>(d.masked.begin(), d.masked.end()),
            (std::vector<int32_t>{0, 1, 3, 4, 6, 7, 5}));
}

}  // namespace
}  // namespace pagoda
