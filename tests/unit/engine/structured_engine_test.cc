// Structured outputs end to end in EngineCore on the CPU (stories260K and a tiny Qwen2 checkpoint
// with stories260K's byte-fallback tokenizer): every completion that finishes with `stop`
// follows its constraint (JSON schemas checked by the independent validator of the structured
// tests), greedy and sampled, n > 1, with log-probabilities, batched and preempted; the end of a
// grammar finishes a request; reasoning delays the constraint. To add a case: a constraint in
// kConstraints and a checker of its text.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>

#include "../structured/json_test_util.h"
#include "core/status.h"
#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "pagoda/llm.h"
#include "structured_engine_cases.h"

namespace pagoda {
namespace {

using engine_test::ConstraintCase;
using engine_test::json_schema;
using engine_test::kNumbers;
using engine_test::kPerson;
using engine_test::small_engine;
using engine_test::validates;
using structured::testing::Json;

TEST(EngineStructured, EveryStoppedAnswerFollowsItsConstraint) {
  for (const std::string& model : {engine_test::kStories, std::string(PAGODA_SOURCE_DIR) +
                                                              "/tests/data/tiny/qwen2-hd64-bias"}) {
    EngineArgs args = small_engine();
    args.model = model;
    args.tokenizer = engine_test::kStories;
    LLM llm(args);
    int stopped = 0;
    for (const ConstraintCase& c : engine_test::constraint_cases()) {
      SCOPED_TRACE(::testing::Message() << model << " " << c.name);
      std::vector<PromptInput> prompts;
      std::vector<SamplingParams> params;
      for (int k = 0; k < 6; ++k) {
        SamplingParams p;
        p.max_tokens = 160;
        p.temperature = k == 0 ? 0.0f : 1.0f;
        p.seed = static_cast<uint64_t>(k);
        p.n = k == 5 ? 3 : 1;
        if (k == 4) p.logprobs = 2;
        p.structured_outputs = c.params;
        prompts.push_back(PromptInput{k % 2 ? "Once upon a time" : "The answer is", {}});
        params.push_back(p);
      }
      for (const GenerateResult& r : llm.generate(prompts, params)) {
        for (const CompletionOutput& o : r.outputs) {
          EXPECT_TRUE(o.error.empty()) << o.error;
          if (o.finish_reason != FinishReason::kStop) continue;
          ++stopped;
          EXPECT_TRUE(c.valid(o.text)) << o.text;
        }
      }
    }
    EXPECT_GE(stopped, 20);
  }
}

TEST(EngineStructured, LogprobsAndTokensAgree) {
  LLM llm(small_engine());
  SamplingParams p;
  p.max_tokens = 40;
  p.temperature = 0.8f;
  p.seed = 5;
  p.logprobs = 3;
  p.structured_outputs = json_schema(kPerson);
  const CompletionOutput o = llm.generate({PromptInput{"Once upon a time", {}}}, p)[0].outputs[0];
  ASSERT_EQ(o.logprobs.size(), o.token_ids.size());
  for (size_t i = 0; i < o.token_ids.size(); ++i) {
    EXPECT_EQ(o.logprobs[i].token, o.token_ids[i]);
    EXPECT_LE(o.logprobs[i].top.size(), 3u);
  }
}

TEST(EngineStructured, TheEndOfTheGrammarFinishesTheRequest) {
  LLM llm(small_engine());
  SamplingParams p;
  p.max_tokens = 100;
  p.temperature = 0;
  p.ignore_eos = true;  // the grammar's end finishes it anyway
  p.min_tokens = 50;
  StructuredOutputsParams so;
  so.choice = std::vector<std::string>{"alpha", "beta"};
  p.structured_outputs = so;
  const CompletionOutput o = llm.generate({PromptInput{"Once", {}}}, p)[0].outputs[0];
  EXPECT_EQ(o.finish_reason, FinishReason::kStop);
  EXPECT_TRUE(o.text == "alpha" || o.text == "beta") << o.text;
}

TEST(EngineStructured, BatchedAndPreemptedRequestsStayValid) {
  // A KV cache of a few blocks and many long constrained requests: preemption recomputes them.
  EngineArgs args = small_engine(64, true, 12 * 16 * 1280);  // 11 usable blocks
  args.max_model_len = 160;
  EngineCore engine(args);
  std::vector<std::shared_ptr<OutputStream>> streams;
  for (int i = 0; i < 24; ++i) {
    EngineRequest r;
    r.prompt = "Once upon a time";
    r.params.max_tokens = 140;
    r.params.temperature = 1.0f;
    r.params.seed = static_cast<uint64_t>(i);
    r.params.structured_outputs = json_schema(kPerson);
    // A tiny random model writes whitespace forever where JSON allows any: allow none.
    r.params.structured_outputs->disable_any_whitespace = true;
    streams.push_back(engine.submit(std::move(r)));
  }
  int stopped = 0;
  for (auto& s : streams) {
    const CompletionOutput o = collect_result(*s).outputs.at(0);
    ASSERT_TRUE(o.error.empty()) << o.error;
    if (o.finish_reason != FinishReason::kStop) continue;
    ++stopped;
    EXPECT_TRUE(validates(kPerson, o.text)) << o.text;
  }
  EXPECT_GE(stopped, 8);
  EXPECT_GT(engine.stats().num_preemptions, 0);
}

TEST(EngineStructured, ReasoningComesFirst) {
  LLM llm(small_engine());
  SamplingParams free = engine_test::greedy(30);
  PromptInput prompt{"Once upon a time", {}};
  const std::string plain = llm.generate({prompt}, free)[0].outputs[0].text;
  const size_t cut = plain.find(" girl");
  ASSERT_NE(cut, std::string::npos) << plain;
  // " girl" ends the "reasoning": up to it the text is free (and the same as without a
  // constraint), after it the grammar applies.
  SamplingParams p = engine_test::greedy(120);
  p.ignore_eos = false;
  StructuredOutputsParams so;
  so.regex = "[0-9]{3}";
  so.reasoning_end = " girl";
  p.structured_outputs = so;
  const CompletionOutput o = llm.generate({prompt}, p)[0].outputs[0];
  ASSERT_EQ(o.finish_reason, FinishReason::kStop) << o.text;
  EXPECT_EQ(o.text.substr(0, cut + 5), plain.substr(0, cut + 5));
  EXPECT_TRUE(std::regex_match(o.text.substr(cut + 5), std::regex("[0-9]{3}"))) << o.text;
  // A prompt that already closed the reasoning: constrained from the first token.
  const CompletionOutput closed =
      llm.generate({PromptInput{"Once upon a time there was a little girl", {}}}, p)[0].outputs[0];
  EXPECT_TRUE(std::regex_match(closed.text, std::regex("[0-9]{3}"))) << closed.text;
}

TEST(EngineStructured, ConflictsFailOnlyThatRequest) {
  LLM llm(small_engine());
  SamplingParams p = engine_test::greedy(20);
  p.allowed_token_ids = std::vector<int32_t>{300, 301};  // no digit among them
  StructuredOutputsParams so;
  so.regex = "[0-9]+";
  p.structured_outputs = so;
  SamplingParams ok = engine_test::greedy(5);
  const auto results = llm.generate({PromptInput{"Once", {}}, PromptInput{"Once", {}}}, {p, ok});
  EXPECT_EQ(results[0].outputs[0].finish_reason, FinishReason::kAbort);
  EXPECT_NE(results[0].outputs[0].error.find("does not follow the grammar"), std::string::npos);
  EXPECT_EQ(results[1].outputs[0].finish_reason, FinishReason::kLength);
}

TEST(EngineStructured, BadConstraintsAreRejectedAtSubmit) {
  LLM llm(small_engine());
  SamplingParams p = engine_test::greedy(4);
  auto error = [&](StructuredOutputsParams so) -> std::string {
    p.structured_outputs = so;
    try {
      (void)llm.generate({PromptInput{"Once", {}}}, p);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error(json_schema(R"({"type": "string", "format": "hostname"})"))
                .find("structured_outputs: json schema: at /format"),
            std::string::npos);
  StructuredOutputsParams grammar;
  grammar.grammar = "root ::= x";
  EXPECT_NE(error(grammar).find("line 1, column 10: undefined rule 'x'"), std::string::npos);
  StructuredOutputsParams two;
  two.regex = "a";
  two.json_object = true;
  EXPECT_NE(error(two).find("exactly one of"), std::string::npos);
}

TEST(EngineStructured, WorkerProcessGivesTheSameConstrainedOutputs) {
  // The masks travel in the plan (RowDraw::allowed, through the step codec to the worker).
  std::vector<std::string> texts[2];
  for (int mp = 0; mp < 2; ++mp) {
    EngineArgs args = engine_test::small_engine();
    if (mp == 1) args.distributed_executor_backend = "mp";
    LLM llm(args);
    for (const engine_test::ConstraintCase& c : engine_test::constraint_cases()) {
      SamplingParams p = engine_test::greedy(60);
      p.ignore_eos = false;
      p.structured_outputs = c.params;
      texts[mp].push_back(
          llm.generate({PromptInput{"Once upon a time", {}}}, p)[0].outputs[0].text);
    }
  }
  EXPECT_EQ(texts[0], texts[1]);
}

TEST(EngineStructured, JumpForwardKeepsTheOutputsAndSavesSteps) {
  // Greedy requests alone in the engine, with the grammar's forced text (the object's keys,
  // `": "`, the closing brace) proposed as drafts and without: the same tokens and
  // log-probabilities, in fewer steps. Also with the worker process, which carries the rows'
  // masks in the plan.
  for (const char* backend : {"uni", "mp"}) {
    SCOPED_TRACE(backend);
    std::vector<CompletionOutput> outs[2];
    int64_t steps[2] = {0, 0};
    for (const int jump : {0, 16}) {
      EngineArgs args = small_engine();
      args.distributed_executor_backend = backend;
      args.structured_outputs_jump_forward = jump;
      EngineCore engine(args);
      for (const char* prompt : {"Once upon a time", "The answer is", "Lily"}) {
        EngineRequest r;
        r.prompt = prompt;
        r.params.max_tokens = 120;
        r.params.temperature = 0;
        r.params.logprobs = 2;
        r.params.structured_outputs = json_schema(kPerson);
        r.params.structured_outputs->disable_any_whitespace = true;
        outs[jump > 0].push_back(collect_result(*engine.submit(std::move(r))).outputs.at(0));
      }
      steps[jump > 0] = engine.stats().num_steps;
    }
    for (size_t i = 0; i < outs[0].size(); ++i) {
      const CompletionOutput& a = outs[0][i];
      const CompletionOutput& b = outs[1][i];
      EXPECT_TRUE(a.error.empty() && b.error.empty()) << a.error << b.error;
      EXPECT_EQ(a.token_ids, b.token_ids);
      EXPECT_EQ(a.text, b.text);
      EXPECT_EQ(a.finish_reason, b.finish_reason);
      ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
      for (size_t t = 0; t < a.logprobs.size(); ++t) {
        EXPECT_NEAR(a.logprobs[t].logprob, b.logprobs[t].logprob, 1e-4) << t;
      }
      if (a.finish_reason == FinishReason::kStop) {
        EXPECT_TRUE(validates(kPerson, a.text)) << a.text;
      }
    }
    // `{"name": "` alone is several tokens of stories260K's vocabulary, and so is each later key.
    std::printf("jump-forward (%s): %lld steps, without: %lld\n", backend,
                static_cast<long long>(steps[1]), static_cast<long long>(steps[0]));
    EXPECT_LT(steps[1] + 10, steps[0]) << steps[1] << " vs " << steps[0];
  }
}

}  // namespace
}  // namespace pagoda
