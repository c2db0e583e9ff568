// vLLM's request fields that change what comes back: prompt_logprobs, return_token_ids,
// return_tokens_as_token_ids, echo on chat, reasoning_effort, request_id, priority under fcfs,
// prompt_embeds, parallel_tool_calls and request templates under --trust-request-chat-template.
// Each is honoured (the response shows it) or refused with a 400 naming it. To add a case, parse
// a body, feed the builder updates and compare the JSON.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/openai/api_error.h"
#include "server/openai/chat_response.h"
#include "server/openai/completion_response.h"
#include "server/openai/response_common.h"
#include "server/openai/tool_parser.h"
#include "test_util.h"

namespace pagoda::openai {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
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

/// An update of completion `index` with `ids` and their text.
RequestOutput update(std::vector<int32_t> ids, int index = 0,
                     std::optional<FinishReason> finish = std::nullopt) {
  RequestOutput out;
  out.index = index;
  out.text = testing::tokenizer().decode(ids, true);
  out.token_ids = std::move(ids);
  out.finish_reason = finish;
  return out;
}

/// Prompt log-probabilities as the engine reports them: none for the first token, then the token
/// with its rank and one alternative.
std::vector<std::optional<TokenLogprobs>> engine_prompt_logprobs(const std::vector<int32_t>& ids) {
  std::vector<std::optional<TokenLogprobs>> lps(ids.size());
  for (size_t i = 1; i < ids.size(); ++i) {
    TokenLogprobs t;
    t.token = ids[i];
    t.logprob = -1.5f * static_cast<float>(i);
    t.rank = static_cast<int32_t>(i) + 1;
    t.top = {{7, -0.25f}};
    lps[i] = t;
  }
  return lps;
}

TEST(VllmFields, PromptLogprobsComeBackOnCompletionChoices) {
  const ServerContext ctx = testing::context();
  const CompletionRequest req =
      parse_completion_request(R"({"prompt": "Once upon", "max_tokens": 2, "prompt_logprobs": 1,
                                   "n": 2})",
                               ctx);
  ASSERT_EQ(req.engine_requests[0].params.prompt_logprobs, 1);
  const std::vector<int32_t>& prompt = req.engine_requests[0].prompt_token_ids;
  ASSERT_GE(prompt.size(), 2u);
  CompletionResponseBuilder b(req, ctx.tokenizer);
  RequestOutput first = update({10}, 0, FinishReason::kLength);
  first.prompt_logprobs = engine_prompt_logprobs(prompt);
  b.add(0, first);
  b.add(0, update({11}, 1, FinishReason::kLength));
  const Json body = b.response();
  for (const Json& choice : body["choices"]) {  // vLLM: every choice of the prompt carries them
    const Json& lps = choice["prompt_logprobs"];
    ASSERT_EQ(lps.size(), prompt.size());
    EXPECT_TRUE(lps[0].is_null());
    const Json& second = lps[1];
    const std::string key = std::to_string(prompt[1]);
    ASSERT_TRUE(second.contains(key)) << second;
    EXPECT_DOUBLE_EQ(second[key]["logprob"].get<double>(), -1.5);
    EXPECT_EQ(second[key]["rank"], 2);
    EXPECT_EQ(second[key]["decoded_token"], token_text(ctx.tokenizer, prompt[1]).text);
    EXPECT_EQ(second.begin().key(), key);  // the prompt token first, then the alternative
    EXPECT_EQ(second["7"]["rank"], 1);
  }
  // Without the field the choice says null, as vLLM's.
  const CompletionRequest plain = parse_completion_request(R"({"prompt": "Hi"})", ctx);
  CompletionResponseBuilder p(plain, ctx.tokenizer);
  p.add(0, update({10}, 0, FinishReason::kLength));
  EXPECT_TRUE(p.response()["choices"][0]["prompt_logprobs"].is_null());
}

TEST(VllmFields, PromptLogprobsOnChatAndWithEcho) {
  const ServerContext ctx = testing::context();
  const ChatRequest req = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "prompt_logprobs": 0})", ctx);
  ChatResponseBuilder b(req, ctx.tokenizer);
  RequestOutput out = update({10}, 0, FinishReason::kStop);
  out.prompt_logprobs = engine_prompt_logprobs(req.engine_request.prompt_token_ids);
  b.add(out);
  const Json body = b.response();
  ASSERT_EQ(body["prompt_logprobs"].size(), req.engine_request.prompt_token_ids.size());
  EXPECT_TRUE(body["prompt_logprobs"][0].is_null());
  // echo asks for them (top_logprobs of them) unless the request says otherwise.
  const ChatRequest echo = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "echo": true, "logprobs": true,
          "top_logprobs": 2})",
      ctx);
  EXPECT_EQ(echo.engine_request.params.prompt_logprobs, 2);
}

TEST(VllmFields, PromptLogprobsAreNotStreamed) {
  const ServerContext ctx = testing::context();
  for (const char* path : {"completions", "chat"}) {
    const ApiError e = error_of([&] {
      if (std::string(path) == "chat") {
        (void)parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}],
            "stream": true, "prompt_logprobs": 2})",
                                 ctx);
      } else {
        (void)parse_completion_request(R"({"prompt": "Hi", "stream": true, "prompt_logprobs": 1})",
                                       ctx);
      }
    });
    EXPECT_EQ(e.status, 400) << path;
    EXPECT_EQ(e.param, "prompt_logprobs") << path;
    EXPECT_THAT(e.message, HasSubstr("stream=True")) << path;
  }
}

TEST(VllmFields, ReturnTokenIdsOnCompletions) {
  const ServerContext ctx = testing::context();
  const CompletionRequest req = parse_completion_request(
      R"({"prompt": "Once", "max_tokens": 3, "return_token_ids": true})", ctx);
  const std::vector<int32_t> prompt = req.engine_requests[0].prompt_token_ids;
  CompletionResponseBuilder whole(req, ctx.tokenizer);
  whole.add(0, update({10, 11}));
  whole.add(0, update({12}, 0, FinishReason::kLength));
  const Json choice = whole.response()["choices"][0];
  EXPECT_EQ(choice["token_ids"], Json({10, 11, 12}));
  EXPECT_EQ(choice["prompt_token_ids"], token_ids_json(prompt));

  const CompletionRequest streamed = parse_completion_request(
      R"({"prompt": "Once", "max_tokens": 3, "return_token_ids": true, "stream": true})", ctx);
  CompletionResponseBuilder s(streamed, ctx.tokenizer);
  const Json c1 = s.stream_chunks(0, update({10, 11}))[0]["choices"][0];
  const Json c2 = s.stream_chunks(0, update({12}, 0, FinishReason::kLength))[0]["choices"][0];
  EXPECT_EQ(c1["prompt_token_ids"], token_ids_json(prompt));  // the first chunk only
  EXPECT_FALSE(c2.contains("prompt_token_ids"));
  EXPECT_EQ(c1["token_ids"], Json({10, 11}));
  EXPECT_EQ(c2["token_ids"], Json({12}));
  // Without the field, no ids.
  const CompletionRequest plain = parse_completion_request(R"({"prompt": "Once"})", ctx);
  CompletionResponseBuilder p(plain, ctx.tokenizer);
  p.add(0, update({10}, 0, FinishReason::kLength));
  EXPECT_FALSE(p.response()["choices"][0].contains("token_ids"));
}

TEST(VllmFields, ReturnTokenIdsOnChat) {
  const ServerContext ctx = testing::context();
  const ChatRequest req = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "return_token_ids": true})", ctx);
  ChatResponseBuilder whole(req, ctx.tokenizer);
  whole.add(update({10, 11}));
  whole.add(update({12}, 0, FinishReason::kStop));
  const Json body = whole.response();
  EXPECT_EQ(body["prompt_token_ids"], token_ids_json(req.engine_request.prompt_token_ids));
  EXPECT_EQ(body["choices"][0]["token_ids"], Json({10, 11, 12}));

  const ChatRequest streamed = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "return_token_ids": true,
          "stream": true})",
      ctx);
  ChatResponseBuilder s(streamed, ctx.tokenizer);
  std::vector<Json> chunks = s.start_chunks();
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0]["prompt_token_ids"], token_ids_json(req.engine_request.prompt_token_ids));
  std::vector<int32_t> seen;
  for (const RequestOutput& out : {update({10, 11}), update({12}, 0, FinishReason::kStop)}) {
    for (const Json& c : s.stream_chunks(out)) {
      if (c["choices"][0].contains("token_ids")) {
        for (const Json& id : c["choices"][0]["token_ids"]) seen.push_back(id.get<int32_t>());
      }
    }
  }
  EXPECT_EQ(seen, (std::vector<int32_t>{10, 11, 12}));
}

TEST(VllmFields, TokensAsTokenIdsInLogprobs) {
  ServerContext ctx = testing::context();
  const CompletionRequest req = parse_completion_request(
      R"({"prompt": "Once", "logprobs": 1, "return_tokens_as_token_ids": true})", ctx);
  CompletionResponseBuilder b(req, ctx.tokenizer);
  RequestOutput out = update({10}, 0, FinishReason::kLength);
  out.logprobs = {TokenLogprobs{10, -0.5f, {{10, -0.5f}}}};
  b.add(0, out);
  const Json lp = b.response()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"][0], "token_id:10");
  EXPECT_TRUE(lp["top_logprobs"][0].contains("token_id:10"));

  // The server's --return-tokens-as-token-ids is the default; the request may turn it off.
  ctx.return_tokens_as_token_ids = true;
  const ChatRequest chat = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true, "top_logprobs": 1})",
      ctx);
  ChatResponseBuilder cb(chat, ctx.tokenizer);
  cb.add(out);
  const Json entry = cb.response()["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(entry["token"], "token_id:10");
  EXPECT_EQ(entry["top_logprobs"][0]["token"], "token_id:10");
  const std::string as_text = "token_id:10";
  EXPECT_EQ(entry["bytes"].size(), as_text.size());
  EXPECT_FALSE(parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}],
                                      "return_tokens_as_token_ids": false})",
                                  ctx)
                   .tokens_as_ids);
}

TEST(VllmFields, EchoOnChatRepeatsTheLastMessageOfTheAnswersRole) {
  const ServerContext ctx = testing::context();
  // continue_final_message: no generation prompt, so the answer continues the assistant message.
  const std::string body = R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Once upon"}], "continue_final_message": true,
      "echo": true)";
  const ChatRequest req = parse_chat_request(body + "}", ctx);
  EXPECT_EQ(req.role, "assistant");
  EXPECT_EQ(req.echo_text, "Once upon");
  ChatResponseBuilder whole(req, ctx.tokenizer);
  whole.add(update({10}, 0, FinishReason::kStop));
  const std::string generated = testing::tokenizer().decode(std::vector<int32_t>{10}, true);
  EXPECT_EQ(whole.response()["choices"][0]["message"]["content"], "Once upon" + generated);

  const ChatRequest streamed = parse_chat_request(body + R"(, "stream": true})", ctx);
  ChatResponseBuilder s(streamed, ctx.tokenizer);
  const std::vector<Json> start = s.start_chunks();
  ASSERT_EQ(start.size(), 2u);  // the role, then the echo
  EXPECT_EQ(start[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(start[1]["choices"][0]["delta"]["content"], "Once upon");

  // With a generation prompt the answer is a new assistant message: a user message is not echoed.
  const ChatRequest fresh =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], "echo": true})", ctx);
  EXPECT_EQ(fresh.role, "assistant");
  EXPECT_EQ(fresh.echo_text, "");
  // Without one, the answer has the last message's role (vLLM), and echoes it.
  const ChatRequest same_role = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi there"}], "echo": true,
          "add_generation_prompt": false})",
      ctx);
  EXPECT_EQ(same_role.role, "user");
  EXPECT_EQ(same_role.echo_text, "Hi there");
}

TEST(VllmFields, ReasoningEffortReachesTheTemplate) {
  const ServerContext ctx = testing::context();
  const ChatRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "low",
          "chat_template": "{{ reasoning_effort }}|{{ enable_thinking }}"})",
      ctx);
  EXPECT_EQ(r.prompt_text, "low|True");
  const ChatRequest off = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "none",
          "chat_template": "{{ reasoning_effort }}|{{ enable_thinking }}"})",
      ctx);
  EXPECT_EQ(off.prompt_text, "none|False");
  // chat_template_kwargs' enable_thinking wins.
  const ChatRequest kw = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "high",
          "chat_template_kwargs": {"enable_thinking": false},
          "chat_template": "{{ reasoning_effort }}|{{ enable_thinking }}"})",
      ctx);
  EXPECT_EQ(kw.prompt_text, "high|False");
  const ApiError e = error_of([&] {
    (void)parse_chat_request(
        R"({"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "extreme"})", ctx);
  });
  EXPECT_EQ(e.param, "reasoning_effort");
}

TEST(VllmFields, RequestIdNamesTheResponse) {
  const ServerContext ctx = testing::context();
  const ChatRequest a = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "request_id": "abc-1"})", ctx);
  const ChatRequest b = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "request_id": "abc-1"})", ctx);
  EXPECT_EQ(a.id, "chatcmpl-abc-1");
  EXPECT_EQ(b.id, "chatcmpl-abc-1");
  // Two requests in flight may share a client's id: the engine's ids differ.
  EXPECT_NE(a.engine_request.request_id, b.engine_request.request_id);
  EXPECT_THAT(a.engine_request.request_id, StartsWith("chatcmpl-abc-1"));
  // The X-Request-Id header wins (vLLM).
  const CompletionRequest c =
      parse_completion_request(R"({"prompt": "Hi", "request_id": "body"})", ctx, "header-7");
  EXPECT_EQ(c.id, "cmpl-header-7");
  CompletionResponseBuilder builder(c, ctx.tokenizer);
  builder.add(0, update({10}, 0, FinishReason::kLength));
  EXPECT_EQ(builder.response()["id"], "cmpl-header-7");
  EXPECT_THAT(parse_completion_request(R"({"prompt": "Hi"})", ctx).id,
              MatchesRegex("cmpl-[0-9a-f]{32}"));
  EXPECT_EQ(error_of([&] {
              (void)parse_completion_request(R"({"prompt": "Hi", "request_id": 5})", ctx);
            }).param,
            "request_id");
}

TEST(VllmFields, PriorityNeedsPriorityScheduling) {
  ServerContext ctx = testing::context();
  ctx.priority_scheduling = false;  // --scheduling-policy fcfs
  for (const char* body :
       {R"({"prompt": "Hi", "priority": 3})",
        R"({"messages": [{"role": "user", "content": "Hi"}], "priority": -1})"}) {
    const ApiError e = error_of([&] {
      if (std::string(body).find("messages") != std::string::npos) {
        (void)parse_chat_request(body, ctx);
      } else {
        (void)parse_completion_request(body, ctx);
      }
    });
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, "priority") << body;
    EXPECT_THAT(e.message, HasSubstr("Priority scheduling is not enabled"));
  }
  // 0 is the default, and fine anywhere.
  EXPECT_EQ(parse_completion_request(R"({"prompt": "Hi", "priority": 0})", ctx)
                .engine_requests[0]
                .priority,
            0);
}

TEST(VllmFields, PromptEmbedsAreRefused) {
  const ServerContext ctx = testing::context();
  const ApiError e = error_of(
      [&] { (void)parse_completion_request(R"({"prompt": "Hi", "prompt_embeds": "AAAA"})", ctx); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "prompt_embeds");
  // Null and an empty list mean "not set", as clients that send every field do.
  EXPECT_NO_THROW(
      (void)parse_completion_request(R"({"prompt": "Hi", "prompt_embeds": null})", ctx));
  EXPECT_NO_THROW((void)parse_completion_request(R"({"prompt": "Hi", "prompt_embeds": []})", ctx));
}

TEST(VllmFields, ParallelToolCallsFalseKeepsTheFirstCall) {
  std::unique_ptr<ToolParser> parser = make_tool_parser("hermes");
  ServerContext ctx = testing::context();
  ctx.tool_parser = parser.get();
  const std::string body = R"({"messages": [{"role": "user", "content": "Weather?"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "parallel_tool_calls": false)";
  const std::string two_calls = R"(<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>)"
                                R"(<tool_call>{"name": "f", "arguments": {"a": 2}}</tool_call>)";
  const ChatRequest req = parse_chat_request(body + "}", ctx);
  EXPECT_FALSE(req.parallel_tool_calls);
  ChatResponseBuilder whole(req, ctx.tokenizer);
  whole.add(testing::text_update(two_calls, FinishReason::kStop));
  const Json message = whole.response()["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"a": 1})");

  const ChatRequest streamed = parse_chat_request(body + R"(, "stream": true})", ctx);
  ChatResponseBuilder s(streamed, ctx.tokenizer);
  int calls = 0;
  for (const Json& c : s.stream_chunks(testing::text_update(two_calls, FinishReason::kStop))) {
    if (c["choices"][0]["delta"].contains("tool_calls")) ++calls;
  }
  EXPECT_EQ(calls, 1);
}

TEST(VllmFields, TemplatesInChatTemplateKwargsAreRequestTemplates) {
  ServerContext ctx = testing::context();
  const ChatRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}],
          "chat_template_kwargs": {"chat_template": "[{{ messages[0].content }}]"}})",
      ctx);
  EXPECT_EQ(r.prompt_text, "[Hi]");
  ctx.allow_request_chat_template = false;
  const ApiError e = error_of([&] {
    (void)parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}],
        "chat_template_kwargs": {"chat_template": "x"}})",
                             ctx);
  });
  EXPECT_EQ(e.param, "chat_template_kwargs");
  EXPECT_THAT(e.message, HasSubstr("--trust-request-chat-template"));
}

}  // namespace
}  // namespace pagoda::openai
