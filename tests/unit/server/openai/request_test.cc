// Parsing and validation of /v1/completions and /v1/chat/completions bodies, and the error JSON.
// Malformed bodies live in tests/server/malformed_requests.json (corpus_test.cc); this file checks
// what accepted bodies become. To add a case, write a body and assert on the parsed request.
#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/status.h"
#include "server/openai/api_error.h"
#include "server/openai/chat_request.h"
#include "server/openai/completion_request.h"
#include "template/error.h"
#include "test_util.h"

namespace pagoda::openai {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

ApiError error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "no ApiException";
  return {};
}

// --- errors

TEST(ApiErrorTest, BodyHasVllmShape) {
  const auto body =
      nlohmann::json::parse(error_body({400, "", "top_p must be in (0, 1]", "top_p"}));
  EXPECT_EQ(body, nlohmann::json::parse(R"({"error": {"message": "top_p must be in (0, 1]",
      "type": "BadRequestError", "param": "top_p", "code": 400}})"));
  const auto missing = nlohmann::json::parse(error_body({404, "", "no model", ""}));
  EXPECT_TRUE(missing["error"]["param"].is_null());
  EXPECT_EQ(missing["error"]["type"], "NotFoundError");
  EXPECT_EQ(nlohmann::json::parse(error_body(unauthorized().error()))["error"]["code"], 401);
  const ApiError large = payload_too_large(1024).error();
  EXPECT_EQ(large.status, 413);
  EXPECT_THAT(large.message, HasSubstr("1024"));
}

TEST(ApiErrorTest, MapsExceptionsToStatuses) {
  EXPECT_EQ(api_error_from(InvalidArgument("top_p must be in (0, 1], got 2")).param, "top_p");
  EXPECT_EQ(api_error_from(InvalidArgument("prompt token id 9 is outside")).param, "prompt");
  EXPECT_EQ(api_error_from(InvalidArgument("something else")).param, "");
  const ApiError raised = api_error_from(tmpl::TemplateRaised("Roles must alternate", 3));
  EXPECT_EQ(raised.status, 400);
  EXPECT_EQ(raised.message, "Roles must alternate");
  EXPECT_EQ(api_error_from(NotFound("x")).status, 404);
  EXPECT_EQ(api_error_from(Unavailable("x")).status, 503);
  const ApiError internal = api_error_from(std::runtime_error("secret detail"));
  EXPECT_EQ(internal.status, 500);
  EXPECT_THAT(internal.message, ::testing::Not(HasSubstr("secret")));
  EXPECT_EQ(api_error_from(bad_request("m", "p")).param, "p");
}

// --- completions

TEST(CompletionRequestTest, StringPromptWithDefaults) {
  const ServerContext ctx = testing::context();
  const CompletionRequest r = parse_completion_request(R"({"prompt": "Once upon a time"})", ctx);
  EXPECT_THAT(r.id, StartsWith("cmpl-"));
  EXPECT_EQ(r.model, "stories260K");
  EXPECT_GT(r.created, 1600000000);
  ASSERT_EQ(r.engine_requests.size(), 1u);
  const EngineRequest& e = r.engine_requests[0];
  EXPECT_EQ(e.prompt_token_ids, testing::tokenizer().encode("Once upon a time", true));
  EXPECT_EQ(e.prompt_token_ids.front(), 1);  // BOS
  EXPECT_FALSE(e.prompt.has_value());
  EXPECT_EQ(e.request_id, r.id + "-0");
  EXPECT_EQ(e.params.max_tokens, 16);
  EXPECT_EQ(e.params.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.echo);
  EXPECT_FALSE(r.logprobs.has_value());
  EXPECT_EQ(r.prompt_texts, std::vector<std::string>{"Once upon a time"});
}

TEST(CompletionRequestTest, PromptShapes) {
  const ServerContext ctx = testing::context();
  const CompletionRequest strings =
      parse_completion_request(R"({"prompt": ["Once", "upon"], "model": "alias"})", ctx);
  ASSERT_EQ(strings.engine_requests.size(), 2u);
  EXPECT_EQ(strings.model, "alias");
  EXPECT_EQ(strings.engine_requests[1].prompt_token_ids, testing::tokenizer().encode("upon", true));
  EXPECT_EQ(strings.engine_requests[1].request_id, strings.id + "-1");

  const CompletionRequest ids = parse_completion_request(R"({"prompt": [1, 400, 35]})", ctx);
  ASSERT_EQ(ids.engine_requests.size(), 1u);
  EXPECT_EQ(ids.engine_requests[0].prompt_token_ids, (std::vector<int32_t>{1, 400, 35}));
  EXPECT_EQ(ids.prompt_texts[0],
            testing::tokenizer().decode(ids.engine_requests[0].prompt_token_ids, false));
  EXPECT_FALSE(ids.prompt_texts[0].empty());

  const CompletionRequest lists = parse_completion_request(R"({"prompt": [[1, 2], [3.0]]})", ctx);
  ASSERT_EQ(lists.engine_requests.size(), 2u);
  EXPECT_EQ(lists.engine_requests[1].prompt_token_ids, (std::vector<int32_t>{3}));
}

TEST(CompletionRequestTest, EverySamplingFieldAndExtension) {
  const ServerContext ctx = testing::context();
  const CompletionRequest r = parse_completion_request(R"({
      "prompt": "Hi", "max_tokens": 32, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
      "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5,
      "repetition_penalty": 1.1, "logit_bias": {"5": -100, "7": 2.5}, "seed": 42,
      "stop": ["\n\n", "The end"], "stop_token_ids": [2, 13], "ignore_eos": true,
      "min_tokens": 3, "n": 3, "best_of": 3, "logprobs": 5, "prompt_logprobs": 0,
      "echo": true, "stream": true, "stream_options": {"include_usage": true},
      "user": "u-1", "priority": -3, "cache_salt": "tenant-a", "add_special_tokens": false,
      "include_stop_str_in_output": true, "suffix": null, "some_new_field": {"x": 1}})",
                                                       ctx);
  const SamplingParams& p = r.engine_requests.at(0).params;
  EXPECT_EQ(p.max_tokens, 32);
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  EXPECT_EQ(p.logit_bias, (std::map<int32_t, float>{{5, -100.0f}, {7, 2.5f}}));
  EXPECT_EQ(p.seed, 42u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n\n", "The end"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{2, 13}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 3);
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.logprobs, 5);
  EXPECT_EQ(p.prompt_logprobs, 0);  // only 0 may be streamed
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.logprobs, 5);
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.include_stop_str_in_output);
  const EngineRequest& e = r.engine_requests[0];
  EXPECT_EQ(e.priority, -3);
  EXPECT_EQ(e.cache_salt, "tenant-a");
  EXPECT_EQ(e.prompt_token_ids, testing::tokenizer().encode("Hi", false));
  EXPECT_NE(e.prompt_token_ids.front(), 1);  // no BOS
}

TEST(CompletionRequestTest, EchoWithLogprobsAsksForPromptLogprobs) {
  const CompletionRequest r = parse_completion_request(
      R"({"prompt": "Hi", "echo": true, "logprobs": 2})", testing::context());
  EXPECT_EQ(r.engine_requests[0].params.prompt_logprobs, 2);
}

TEST(CompletionRequestTest, NullsMeanDefaults) {
  const CompletionRequest r = parse_completion_request(
      R"({"prompt": "Hi", "max_tokens": null, "temperature": null, "stream": null,
          "stream_options": null, "logprobs": null, "model": null, "best_of": null})",
      testing::context());
  EXPECT_EQ(r.engine_requests[0].params.max_tokens, 16);
  EXPECT_FLOAT_EQ(r.engine_requests[0].params.temperature, 1.0f);
  EXPECT_EQ(r.model, "stories260K");
}

TEST(CompletionRequestTest, GenerationDefaultsApplyUnlessTheRequestSetsThem) {
  ServerContext ctx = testing::context();
  ctx.defaults.temperature = 0.7f;
  ctx.defaults.top_k = 20;
  const CompletionRequest unset = parse_completion_request(R"({"prompt": "Hi"})", ctx);
  EXPECT_FLOAT_EQ(unset.engine_requests[0].params.temperature, 0.7f);
  EXPECT_EQ(unset.engine_requests[0].params.top_k, 20);
  const CompletionRequest set =
      parse_completion_request(R"({"prompt": "Hi", "temperature": 0})", ctx);
  EXPECT_FLOAT_EQ(set.engine_requests[0].params.temperature, 0.0f);
}

TEST(CompletionRequestTest, ContextLengthBoundary) {
  const ServerContext ctx = testing::context();
  // 12 prompt ids + 500 = 512 fits exactly; one more token does not.
  const std::string ids = "[1,2,3,4,5,6,7,8,9,10,11,12]";
  EXPECT_NO_THROW(
      (void)parse_completion_request(R"({"prompt": )" + ids + R"(, "max_tokens": 500})", ctx));
  const ApiError e = error_of([&] {
    (void)parse_completion_request(R"({"prompt": )" + ids + R"(, "max_tokens": 501})", ctx);
  });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_THAT(e.message, HasSubstr("maximum context length is 512 tokens"));
  EXPECT_THAT(e.message, HasSubstr("you requested 513 tokens (12 in the messages, 501 in the"));
}

TEST(CompletionRequestTest, TruncatePromptTokensKeepsTheLastTokens) {
  const ServerContext ctx = testing::context();
  const CompletionRequest r = parse_completion_request(
      R"({"prompt": [[1,2,3,4,5,6], [7,8]], "truncate_prompt_tokens": 3, "max_tokens": 4})", ctx);
  EXPECT_EQ(r.engine_requests[0].prompt_token_ids, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(r.engine_requests[1].prompt_token_ids, (std::vector<int32_t>{7, 8}));
  // The echoed text is that of the kept tokens.
  const std::vector<int32_t> kept = {4, 5, 6};
  EXPECT_EQ(r.prompt_texts[0], testing::tokenizer().decode(kept, false));

  // A text prompt longer than the context fits once cut; -1 keeps max_model_len tokens.
  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += "Once upon a time ";
  const CompletionRequest cut = parse_completion_request(
      R"({"prompt": ")" + long_text + R"(", "truncate_prompt_tokens": 100, "max_tokens": 8})", ctx);
  const std::vector<int32_t> all = testing::tokenizer().encode(long_text, true);
  ASSERT_GT(all.size(), 512u);
  EXPECT_EQ(cut.engine_requests[0].prompt_token_ids,
            std::vector<int32_t>(all.end() - 100, all.end()));
  const CompletionRequest whole = parse_completion_request(
      R"({"prompt": [1,2,3], "truncate_prompt_tokens": -1, "max_tokens": 8})", ctx);
  EXPECT_EQ(whole.engine_requests[0].prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));

  for (const char* bad : {"0", "-2", "513", "1.5", "\"3\""}) {
    SCOPED_TRACE(bad);
    const ApiError e = error_of([&] {
      (void)parse_completion_request(
          std::string(R"({"prompt": [1,2,3], "truncate_prompt_tokens": )") + bad + "}", ctx);
    });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "truncate_prompt_tokens");
  }
}

TEST(CompletionRequestTest, UnsupportedVllmFieldsAreA400WhenSet) {
  const ServerContext ctx = testing::context();
  const char* set[][2] = {{"logits_processors", R"(["x"])"}};
  for (const auto& [field, value] : set) {
    SCOPED_TRACE(field);
    const std::string body = std::string(R"({"prompt": "Hi", ")") + field + R"(": )" + value + "}";
    const ApiError e = error_of([&] { (void)parse_completion_request(body, ctx); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, field);
    const ApiError chat = error_of([&] {
      (void)parse_chat_request(
          std::string(R"({"messages": [{"role": "user", "content": "Hi"}], ")") + field + R"(": )" +
              value + "}",
          ctx);
    });
    EXPECT_EQ(chat.param, field);
  }
  // Some clients send every field with its default: those pass.
  const CompletionRequest r = parse_completion_request(
      R"({"prompt": "Hi", "use_beam_search": false, "guided_json": null, "logits_processors": [],
          "guided_regex": "", "response_format": {"type": "text"}})",
      ctx);
  EXPECT_FALSE(r.engine_requests[0].params.structured_outputs);
}

TEST(CompletionRequestTest, BeamSearchFieldsReachTheEngineWithoutTheSamplingDefaults) {
  ServerContext ctx = testing::context();
  ctx.defaults.top_p = 0.9f;  // a generation_config.json's sampling defaults
  ctx.defaults.top_k = 40;
  const CompletionRequest r = parse_completion_request(
      R"({"prompt": "Hi", "use_beam_search": true, "n": 3, "length_penalty": 0.5,
          "early_stopping": "never", "stream": true})",
      ctx);
  const SamplingParams& p = r.engine_requests[0].params;
  EXPECT_TRUE(p.use_beam_search);
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.length_penalty, 0.5f);
  EXPECT_EQ(p.early_stopping, EarlyStopping::kNever);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.top_k, 0);
  const ChatRequest chat = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "use_beam_search": true,
          "early_stopping": true})",
      ctx);
  EXPECT_TRUE(chat.engine_request.params.use_beam_search);
  EXPECT_EQ(chat.engine_request.params.early_stopping, EarlyStopping::kTrue);
  // A field the request sets itself is checked: a 400 naming it.
  const ApiError e = error_of([&] {
    (void)parse_completion_request(R"({"prompt": "Hi", "use_beam_search": true, "top_k": 5})", ctx);
  });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "top_k");
  for (const char* bad : {"1", "\"always\""}) {
    SCOPED_TRACE(bad);
    const ApiError t = error_of([&] {
      (void)parse_completion_request(
          std::string(R"({"prompt": "Hi", "use_beam_search": true, "early_stopping": )") + bad +
              "}",
          ctx);
    });
    EXPECT_EQ(t.param, "early_stopping");
  }
}

TEST(CompletionRequestTest, IntegralFloatsCountAsIntegers) {
  const CompletionRequest r = parse_completion_request(
      R"({"prompt": "Hi", "max_tokens": 8.0, "n": 2.0})", testing::context());
  EXPECT_EQ(r.engine_requests[0].params.max_tokens, 8);
  EXPECT_EQ(r.n, 2);
}

TEST(CompletionRequestTest, TextPromptsNeedATokenizer) {
  ServerContext ctx = testing::context();
  ctx.tokenizer = nullptr;
  EXPECT_EQ(error_of([&] { (void)parse_completion_request(R"({"prompt": "Hi"})", ctx); }).param,
            "prompt");
  EXPECT_NO_THROW((void)parse_completion_request(R"({"prompt": [1, 2]})", ctx));
}

// A 100,000-prompt list held the engine for 13 s and 1 GB: prompts and sequences (n x prompts)
// per request are bounded, and a request past a bound is a 400 naming the field.
TEST(CompletionRequestTest, PromptsAndSequencesPerRequestAreBounded) {
  ServerContext ctx = testing::context();
  ctx.max_prompts_per_request = 4;
  ctx.max_sequences_per_request = 8;
  auto prompts = [](int count, int n) {
    nlohmann::json body = {{"prompt", nlohmann::json::array()}, {"n", n}};
    for (int i = 0; i < count; ++i) body["prompt"].push_back(i % 2 ? "Hi" : "Once");
    return body.dump();
  };
  EXPECT_EQ(parse_completion_request(prompts(4, 2), ctx).engine_requests.size(), 4u);
  const ApiError many = error_of([&] { (void)parse_completion_request(prompts(5, 1), ctx); });
  EXPECT_EQ(many.status, 400);
  EXPECT_EQ(many.param, "prompt");
  EXPECT_THAT(many.message, HasSubstr("5 prompts"));
  EXPECT_THAT(many.message, HasSubstr("at most 4"));
  const ApiError wide = error_of([&] { (void)parse_completion_request(prompts(3, 3), ctx); });
  EXPECT_EQ(wide.param, "n");
  EXPECT_THAT(wide.message, HasSubstr("9 sequences"));
  // Token-id prompts count the same way; one list of ids is one prompt.
  EXPECT_EQ(error_of([&] {
              (void)parse_completion_request(R"({"prompt": [[1], [2], [3], [4], [5]]})", ctx);
            }).param,
            "prompt");
  EXPECT_NO_THROW((void)parse_completion_request(R"({"prompt": [1, 2, 3, 4, 5, 6], "n": 8})", ctx));
  // Chat: one prompt, n sequences.
  const char* chat = R"({"messages": [{"role": "user", "content": "Hi"}], "n": 9})";
  EXPECT_EQ(error_of([&] { (void)parse_chat_request(chat, ctx); }).param, "n");
}

// --- chat

constexpr const char* kQwenSystem =
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\n";

TEST(ChatRequestTest, RendersWithTheModelTemplateAndNoBos) {
  const ServerContext ctx = testing::context();
  const ChatRequest r =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "Hello"}]})", ctx);
  EXPECT_THAT(r.id, StartsWith("chatcmpl-"));
  EXPECT_EQ(r.engine_request.request_id, r.id);
  EXPECT_EQ(r.prompt_text, std::string(kQwenSystem) +
                               "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(r.engine_request.prompt_token_ids, testing::tokenizer().encode(r.prompt_text, false));
  // No limit given: the completion may fill the rest of the context (vLLM).
  EXPECT_EQ(r.engine_request.params.max_tokens,
            512 - static_cast<int>(r.engine_request.prompt_token_ids.size()));
  EXPECT_FALSE(r.engine_request.params.logprobs.has_value());
  EXPECT_EQ(r.tool_choice, "none");
}

TEST(ChatRequestTest, ContentPartsAndRoles) {
  const ChatRequest r = parse_chat_request(R"({"messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}],
      "add_generation_prompt": false, "max_tokens": 5})",
                                           testing::context());
  EXPECT_THAT(r.prompt_text, HasSubstr("<|im_start|>user\nHello\nthere<|im_end|>\n"));
  EXPECT_THAT(r.prompt_text, ::testing::EndsWith("<|im_end|>\n"));
}

TEST(ChatRequestTest, MaxCompletionTokensWinsAndLogprobs) {
  const ChatRequest r = parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}],
      "max_tokens": 50, "max_completion_tokens": 7, "logprobs": true, "top_logprobs": 3,
      "n": 2, "seed": 1, "stream": true, "stream_options": {"include_usage": true},
      "priority": 2, "cache_salt": "s", "include_stop_str_in_output": true, "user": "me",
      "response_format": {"type": "text"}, "parallel_tool_calls": false})",
                                           testing::context());
  EXPECT_EQ(r.engine_request.params.max_tokens, 7);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.engine_request.params.logprobs, 3);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.engine_request.params.seed, 1u);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.engine_request.priority, 2);
  EXPECT_EQ(r.engine_request.cache_salt, "s");
  EXPECT_TRUE(r.include_stop_str_in_output);
  const ChatRequest plain = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true})", testing::context());
  EXPECT_EQ(plain.engine_request.params.logprobs, 0);
}

TEST(ChatRequestTest, ContinueFinalMessageCutsAfterItsText) {
  const ChatRequest r = parse_chat_request(R"({"messages": [
      {"role": "user", "content": "Say hello"}, {"role": "assistant", "content": "Hel "}],
      "continue_final_message": true, "max_tokens": 4})",
                                           testing::context());
  EXPECT_EQ(r.prompt_text, std::string(kQwenSystem) +
                               "<|im_start|>user\nSay hello<|im_end|>\n<|im_start|>assistant\nHel");
}

TEST(ChatRequestTest, ToolsAndToolCallsReachTheTemplate) {
  ServerContext ctx = testing::context();
  ctx.max_model_len = 4096;  // the tool prompt is long in stories260K's tiny vocabulary
  const ChatRequest r = parse_chat_request(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
      "tools": [{"type": "function", "function": {"name": "get_weather",
        "description": "Weather now", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}}}}],
      "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "max_tokens": 4})",
                                           ctx);
  EXPECT_EQ(r.tool_choice, "get_weather");
  EXPECT_THAT(r.prompt_text, HasSubstr("# Tools"));
  EXPECT_THAT(r.prompt_text, HasSubstr("\"name\": \"get_weather\""));
  // The arguments string became an object, so the template's tojson writes it as JSON.
  EXPECT_THAT(r.prompt_text,
              HasSubstr(R"({"name": "get_weather", "arguments": {"city": "Paris"}})"));
  EXPECT_THAT(r.prompt_text, HasSubstr("<tool_response>\nsunny\n</tool_response>"));
}

TEST(ChatRequestTest, RequestTemplateAndKwargs) {
  const ChatRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
          "chat_template": "{{ bos_token }}{{ greeting }} {{ messages[0].content }}",
          "chat_template_kwargs": {"greeting": "Hello"}})",
      testing::context());
  EXPECT_EQ(r.prompt_text, "<s>Hello Hi");
  EXPECT_EQ(r.engine_request.prompt_token_ids.front(), 1);  // the template wrote BOS
  ServerContext strict = testing::context();
  strict.allow_request_chat_template = false;
  EXPECT_EQ(error_of([&] {
              (void)parse_chat_request(
                  R"({"messages": [{"role": "user", "content": "Hi"}], "chat_template": "x"})",
                  strict);
            }).param,
            "chat_template");
}

TEST(ChatRequestTest, TemplateRaiseIsA400WithItsMessage) {
  const ApiError e = error_of([] {
    (void)parse_chat_request(
        R"({"messages": [{"role": "user", "content": "Hi"}],
            "chat_template": "{{ raise_exception('No system messages here') }}"})",
        testing::context());
  });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.message, "No system messages here");
}

TEST(ChatRequestTest, NoTemplateIsA400) {
  ServerContext ctx = testing::context();
  ctx.chat_template = nullptr;
  EXPECT_EQ(error_of([&] {
              (void)parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}]})", ctx);
            }).status,
            400);
}

TEST(ChatRequestTest, TruncatePromptTokensCutsTheRenderedPrompt) {
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += "Once upon a time ";
  const ChatRequest r =
      parse_chat_request(R"({"messages": [{"role": "user", "content": ")" + long_text +
                             R"("}], "truncate_prompt_tokens": 500, "max_tokens": 10})",
                         testing::context());
  const std::vector<int32_t> all = testing::tokenizer().encode(r.prompt_text, false);
  ASSERT_GT(all.size(), 500u);
  EXPECT_EQ(r.engine_request.prompt_token_ids, std::vector<int32_t>(all.end() - 500, all.end()));
}

TEST(ChatRequestTest, PromptFillingTheContextIsA400OnMessages) {
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += "Once upon a time ";
  const ApiError e = error_of([&] {
    (void)parse_chat_request(
        R"({"messages": [{"role": "user", "content": ")" + long_text + R"("}]})",
        testing::context());
  });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_THAT(e.message, HasSubstr("maximum context length is 512 tokens"));
}

}  // namespace
}  // namespace pagoda::openai
