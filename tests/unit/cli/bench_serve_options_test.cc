// `pagoda bench serve`'s options: the request body each prompt becomes (the sampling flags, the
// endpoint's form of logprobs, --extra-body last), and bad values refused by name before any
// request is sent, through the real command line. To add a flag, add its bad values below.
#include <gtest/gtest.h>

#include "cli/bench_serve_options.h"
#include "cli/commands.h"
#include "core/status.h"

namespace pagoda::cli {
namespace {

using nlohmann::json;

client::SampleRequest ids_prompt() {
  client::SampleRequest r;
  r.prompt_token_ids = {5, 6, 7};
  r.prompt_len = 3;
  r.output_len = 9;
  return r;
}

TEST(BenchServeOptions, CompletionBodyCarriesTheSamplingFlags) {
  ServeBenchOptions o;
  o.temperature = 0.8;
  o.top_p = 0.95;
  o.top_k = 50;
  o.min_p = 0.05;
  o.logprobs = 5;
  const json body = request_body(o, "m", ids_prompt());
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], json::array({5, 6, 7}));
  EXPECT_EQ(body["max_tokens"], 9);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_DOUBLE_EQ(body["temperature"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(body["top_p"].get<double>(), 0.95);
  EXPECT_EQ(body["top_k"], 50);
  EXPECT_DOUBLE_EQ(body["min_p"].get<double>(), 0.05);
  EXPECT_EQ(body["logprobs"], 5);  // completions: the number
  EXPECT_FALSE(body.contains("top_logprobs"));
}

TEST(BenchServeOptions, UnsetSamplingFlagsAreNotSentButGreedyIs) {
  const json body = request_body(ServeBenchOptions{}, "m", ids_prompt());
  EXPECT_EQ(body["temperature"], 0.0);  // vLLM's bench default: greedy
  for (const char* key : {"top_p", "top_k", "min_p", "logprobs"}) EXPECT_FALSE(body.contains(key));
}

TEST(BenchServeOptions, ChatBodyTakesTextAndTopLogprobs) {
  ServeBenchOptions o;
  o.endpoint = "/v1/chat/completions";
  o.logprobs = 3;
  client::SampleRequest r;
  r.prompt_text = "tell me a story";
  r.output_len = 4;
  const json body = request_body(o, "m", r);
  EXPECT_EQ(body["messages"], json::parse(R"([{"role": "user", "content": "tell me a story"}])"));
  EXPECT_FALSE(body.contains("prompt"));
  EXPECT_EQ(body["logprobs"], true);  // chat: a flag and the number as top_logprobs
  EXPECT_EQ(body["top_logprobs"], 3);
  EXPECT_THROW((void)request_body(o, "m", ids_prompt()), InvalidArgument);
}

TEST(BenchServeOptions, ExtraBodyIsMergedLastAndWins) {
  ServeBenchOptions o;
  o.top_p = 0.5;
  o.extra_body = R"({"top_p": 0.9, "seed": 7, "guided_choice": ["a", "b"]})";
  client::SampleRequest r;
  r.prompt_text = "text prompt";
  r.output_len = 2;
  const json body = request_body(o, "m", r);
  EXPECT_EQ(body["prompt"], "text prompt");
  EXPECT_DOUBLE_EQ(body["top_p"].get<double>(), 0.9);
  EXPECT_EQ(body["seed"], 7);
  EXPECT_EQ(body["guided_choice"], json::array({"a", "b"}));
}

/// The message of the error that `pagoda bench serve ARGS` stops with, before any request (the
/// server address is unused: validation comes first).
std::string refusal(std::vector<std::string> args) {
  CLI::App app{"pagoda"};
  int exit_code = 0;
  register_all_commands(app, exit_code);
  args.insert(args.begin(), {"bench", "serve", "--base-url", "http://127.0.0.1:9"});
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed list
  try {
    app.parse(reversed);
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const CLI::Error& e) {
    return std::string("CLI11: ") + e.what();
  }
  return "accepted";
}

TEST(BenchServeOptions, BadValuesAreRefusedNamingTheFlag) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--temperature", "-0.5"}, "--temperature"},
      {{"--top-p", "0"}, "--top-p"},
      {{"--top-p", "1.01"}, "--top-p"},
      {{"--top-k", "-2"}, "--top-k"},
      {{"--min-p", "1.5"}, "--min-p"},
      {{"--logprobs", "-1"}, "--logprobs"},
      {{"--extra-body", "[1, 2]"}, "--extra-body"},
      {{"--extra-body", "{oops"}, "--extra-body"},
      {{"--percentile-metrics", "ttft,p99"}, "--percentile-metrics"},
      {{"--metric-percentiles", "50,200"}, "--metric-percentiles"},
      {{"--goodput", "ttft:500", "latency:3"}, "--goodput"},
      {{"--goodput", "tpot=50"}, "--goodput"},
      {{"--dataset-name", "sharegpt"}, "--dataset-path"},
      {{"--dataset-name", "sharegpt", "--dataset-path", "x.json", "--random-prefix-len", "8"},
       "--random-prefix-len"},
      {{"--prefix-repetition-num-prefixes", "4"}, "--prefix-repetition-num-prefixes"},
      {{"--dataset-path", "x.json"}, "--dataset-path"},
  };
  for (const auto& [args, flag] : cases) {
    const std::string message = refusal(args);
    EXPECT_NE(message.find(flag), std::string::npos) << args.front() << ": " << message;
    EXPECT_EQ(message.find("CLI11"), std::string::npos) << message;
  }
  // CLI11's own checks name the flag too.
  EXPECT_NE(refusal({"--random-prefix-len", "-1"}).find("--random-prefix-len"), std::string::npos);
  EXPECT_NE(refusal({"--dataset-name", "sonnet"}).find("--dataset"), std::string::npos);
}

TEST(BenchServeOptions, SamplesTheChosenDataset) {
  ServeBenchOptions o;
  o.num_prompts = 6;
  o.random_input_len = 4;
  o.random_prefix_len = 3;
  auto requests = sample_dataset(o, 100, {});
  ASSERT_EQ(requests.size(), 6u);
  EXPECT_EQ(requests[0].prompt_token_ids.size(), 7u);
  o.dataset = "prefix_repetition";
  o.prefix_repetition_num_prefixes = 2;
  o.prefix_repetition_prefix_len = 5;
  o.prefix_repetition_suffix_len = 1;
  requests = sample_dataset(o, 100, {});
  ASSERT_EQ(requests.size(), 6u);
  EXPECT_EQ(requests[0].prompt_len, 6);
  o.dataset = "sharegpt";
  o.dataset_path = PAGODA_SOURCE_DIR "/tests/data/sharegpt/tiny_sharegpt.json";
  o.no_oversample = true;
  const auto words = [](std::string_view text) {
    return static_cast<int64_t>(std::count(text.begin(), text.end(), ' ') + 1);
  };
  requests = sample_dataset(o, 0, words);
  EXPECT_EQ(requests.size(), 3u);
  EXPECT_FALSE(requests[0].prompt_text.empty());
}

}  // namespace
}  // namespace pagoda::cli
