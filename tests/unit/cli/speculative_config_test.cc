// --speculative-config as vLLM takes it: the ngram keys and their defaults, and refusals that
// name the key or the method.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cli/speculative_config.h"
#include "core/status.h"

namespace pagoda::cli {
namespace {

std::string error_of(const std::string& json) {
  try {
    (void)parse_speculative_config(json);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(SpeculativeConfigFlag, NgramKeysAndDefaults) {
  SpeculativeConfig c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
          "prompt_lookup_max": 5})");
  EXPECT_EQ(c.method, "ngram");
  EXPECT_EQ(c.num_speculative_tokens, 4);
  EXPECT_EQ(c.prompt_lookup_min, 2);
  EXPECT_EQ(c.prompt_lookup_max, 5);
  EXPECT_TRUE(c.adaptive);
  // vLLM's defaults: both 5; one given, the other equals it.
  c = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3})");
  EXPECT_EQ(c.prompt_lookup_min, 5);
  EXPECT_EQ(c.prompt_lookup_max, 5);
  c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})");
  EXPECT_EQ(c.prompt_lookup_min, 4);
  // The older spelling: the model "[ngram]" without a method; vLLM keys without effect here.
  c = parse_speculative_config(
      R"({"model": "[ngram]", "num_speculative_tokens": 2, "disable_log_stats": true,
          "adaptive": false, "draft_row_cost": 0.5})");
  EXPECT_EQ(c.method, "ngram");
  EXPECT_FALSE(c.adaptive);
  EXPECT_EQ(c.draft_row_cost, 0.5);
}

TEST(SpeculativeConfigFlag, DraftModel) {
  // vLLM infers draft_model from a model that is not [ngram]; the explicit name works too.
  for (const char* json : {R"({"model": "/d", "num_speculative_tokens": 3})",
                           R"({"method": "draft_model", "model": "/d", "num_speculative_tokens": 3,
                               "adaptive": false})"}) {
    const SpeculativeConfig c = parse_speculative_config(json);
    EXPECT_EQ(c.method, "draft_model");
    EXPECT_EQ(c.model, "/d");
    EXPECT_EQ(c.num_speculative_tokens, 3);
    EXPECT_TRUE(c.quantization.empty());
    EXPECT_FALSE(c.enforce_eager);
  }
  // vLLM's keys for the draft's weight format and its eager passes.
  const SpeculativeConfig c = parse_speculative_config(
      R"({"model": "/d", "num_speculative_tokens": 3, "quantization": "fp8",
          "enforce_eager": true})");
  EXPECT_EQ(c.quantization, "fp8");
  EXPECT_TRUE(c.enforce_eager);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 3, "quantization": "fp8"})")
                .find("quantization applies to a draft model"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": "/d", "num_speculative_tokens": 3, "enforce_eager": 1})")
                .find("enforce_eager must be true or false"),
            std::string::npos);
}

TEST(SpeculativeConfigFlag, EagleAndParallelDrafters) {
  for (const char* method : {"eagle", "eagle3", "parallel_draft"}) {
    const SpeculativeConfig c = parse_speculative_config(fmt::format(
        R"({{"method": "{}", "model": "/h", "num_speculative_tokens": 4,
            "bench_acceptance_rate": 0.7}})",
        method));
    EXPECT_EQ(c.method, method);
    EXPECT_EQ(c.model, "/h");
    EXPECT_EQ(c.num_speculative_tokens, 4);
    ASSERT_TRUE(c.bench_acceptance_rate.has_value());
    EXPECT_EQ(*c.bench_acceptance_rate, 0.7);
    EXPECT_NE(error_of(fmt::format(R"({{"method": "{}", "num_speculative_tokens": 3}})", method))
                  .find(fmt::format("model is required with method {}", method)),
              std::string::npos);
  }
  EXPECT_FALSE(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2})")
                   .bench_acceptance_rate.has_value());
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 2,
                         "bench_acceptance_rate": 1.5})")
                .find("bench_acceptance_rate must be in [0, 1], got 1.5"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 2,
                         "bench_acceptance_rate": "high"})")
                .find("bench_acceptance_rate must be a number"),
            std::string::npos);
}

TEST(SpeculativeConfigFlag, RefusalsNameWhatIsWrong) {
  EXPECT_EQ(error_of("{"), error_of("{")) << "stable";
  EXPECT_NE(error_of("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{}").find("method is required"), std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram"})").find("num_speculative_tokens is required"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "medusa", "model": "/m", "num_speculative_tokens": 3})")
                .find("method 'medusa' (model /m) is not supported by pagoda yet"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "draft_model", "num_speculative_tokens": 3})")
                .find("model is required with method draft_model"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": "/draft"})")
                .find("num_speculative_tokens is required with method draft_model"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": "/draft", "num_speculative_tokens": 3, "prompt_lookup_max": 2})")
                .find("prompt_lookup_max applies to method ngram only"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": "/draft", "num_speculative_tokens": 16})")
                .find("num_speculative_tokens must be in [1, 15], got 16"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "deepseek_mtp", "num_speculative_tokens": 1})")
                .find("'deepseek_mtp' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "magic", "num_speculative_tokens": 1})")
                .find("unknown method 'magic'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 2, "foo": 1})")
                .find("key 'foo' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": "4"})")
                .find("num_speculative_tokens must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 0})")
                .find("num_speculative_tokens must be in [1, 15], got 0"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 2,
                         "prompt_lookup_min": 4, "prompt_lookup_max": 2})")
                .find("prompt_lookup_min=4 must be <= prompt_lookup_max=2"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 2,
                         "draft_tensor_parallel_size": 2})")
                .find("draft_tensor_parallel_size: only 1"),
            std::string::npos);
}

}  // namespace
}  // namespace pagoda::cli
