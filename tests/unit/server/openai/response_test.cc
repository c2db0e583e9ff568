// Response builders (completions and chat, streamed and whole), SSE framing and the small
// endpoints. Engine updates are written by hand as the engine would stream them. To add a case,
// build a request with parse_*_request, feed RequestOutputs and assert on the JSON.
#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/openai/api_error.h"
#include "server/openai/chat_response.h"
#include "server/openai/completion_response.h"
#include "server/openai/endpoints.h"
#include "server/openai/sse.h"
#include "test_util.h"

namespace pagoda::openai {
namespace {

using ::testing::HasSubstr;

RequestOutput update(int index, std::vector<int32_t> ids, std::string text,
                     std::optional<FinishReason> finish = std::nullopt,
                     std::string stop_reason = "") {
  RequestOutput out;
  out.index = index;
  out.token_ids = std::move(ids);
  out.text = std::move(text);
  out.finish_reason = finish;
  out.stop_reason = std::move(stop_reason);
  out.num_prompt_tokens = 0;
  return out;
}

TEST(CompletionResponseTest, WholeResponseWithIndicesAndUsage) {
  const CompletionRequest req = parse_completion_request(
      R"({"prompt": ["Once", "upon a"], "n": 2, "max_tokens": 4})", testing::context());
  CompletionResponseBuilder b(req, &testing::tokenizer());
  // Prompt 1, completion 1 -> choice 3; prompt 0, completion 0 -> choice 0, and so on.
  b.add(1, update(1, {10}, "a"));
  b.add(0, update(0, {11, 12}, " there"));
  b.add(1, update(1, {13}, "b", FinishReason::kLength));
  b.add(0, update(0, {}, " was", FinishReason::kStop));
  b.add(0, update(1, {14}, "x", FinishReason::kLength));
  RequestOutput last = update(0, {15}, "y", FinishReason::kStop, "2");
  last.num_cached_tokens = 1;
  b.add(1, last);
  const Json body = b.response();
  EXPECT_EQ(body["id"], req.id);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "stories260K");
  EXPECT_EQ(body["created"], req.created);
  ASSERT_EQ(body["choices"].size(), 4u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["text"], " there was");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(body["choices"][0]["stop_reason"].is_null());  // EOS
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(body["choices"][1]["text"], "x");
  EXPECT_EQ(body["choices"][2]["text"], "y");
  EXPECT_EQ(body["choices"][2]["stop_reason"], "2");  // not a requested stop token: as sent
  EXPECT_EQ(body["choices"][3]["index"], 3);
  EXPECT_EQ(body["choices"][3]["text"], "ab");
  EXPECT_EQ(body["choices"][3]["finish_reason"], "length");
  const size_t prompt_tokens = req.engine_requests[0].prompt_token_ids.size() +
                               req.engine_requests[1].prompt_token_ids.size();
  EXPECT_EQ(body["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(body["usage"]["completion_tokens"], 6);
  EXPECT_EQ(body["usage"]["total_tokens"], prompt_tokens + 6);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
}

TEST(CompletionResponseTest, StopReasonsAndIncludeStopStr) {
  const CompletionRequest req = parse_completion_request(
      R"({"prompt": "Hi", "stop": ["END"], "stop_token_ids": [13], "n": 2,
          "include_stop_str_in_output": true})",
      testing::context());
  CompletionResponseBuilder b(req, &testing::tokenizer());
  b.add(0, update(0, {5}, "ab", FinishReason::kStop, "END"));
  b.add(0, update(1, {13}, "cd", FinishReason::kStop, "13"));
  const Json body = b.response();
  EXPECT_EQ(body["choices"][0]["text"], "abEND");
  EXPECT_EQ(body["choices"][0]["stop_reason"], "END");
  EXPECT_EQ(body["choices"][1]["text"], "cd");
  EXPECT_EQ(body["choices"][1]["stop_reason"], 13);  // a stop token id is a number
}

TEST(CompletionResponseTest, EchoAndLogprobs) {
  const CompletionRequest req = parse_completion_request(
      R"({"prompt": [1, 400], "echo": true, "logprobs": 1, "max_tokens": 2})", testing::context());
  CompletionResponseBuilder b(req, &testing::tokenizer());
  RequestOutput first =
      update(0, {35}, testing::tokenizer().decode(std::vector<int32_t>{35}, false));
  first.logprobs = {{35, -0.5f, {{35, -0.5f}, {36, -1.5f}}}};
  first.prompt_logprobs = {std::nullopt, TokenLogprobs{400, -2.0f, {{401, -1.0f}}}};
  b.add(0, first);
  RequestOutput second = update(0, {36}, "", FinishReason::kLength);
  second.logprobs = {{36, -std::numeric_limits<float>::infinity(), {}}};
  b.add(0, second);
  const Json choice = b.response()["choices"][0];
  EXPECT_EQ(choice["text"], req.prompt_texts[0] + first.text);
  const Json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);  // 2 prompt tokens + 2 generated
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][1].get<double>(), -2.0);
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][2].get<double>(), -0.5);
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][3].get<double>(), -9999.0);  // -inf has no JSON form
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"][2].size(), 1u);  // top-1 is the chosen token itself
  EXPECT_EQ(lp["top_logprobs"][1].size(), 2u);  // top-1 alternative + the chosen token
  for (size_t i = 1; i < lp["text_offset"].size(); ++i) {
    EXPECT_GE(lp["text_offset"][i].get<int>(), lp["text_offset"][i - 1].get<int>());
  }
  // The body dumps as valid JSON even with odd token bytes.
  EXPECT_NO_THROW({
    const nlohmann::json parsed = nlohmann::json::parse(json_body(b.response()));
    EXPECT_TRUE(parsed.is_object());
  });
}

TEST(CompletionResponseTest, StreamChunksAndUsage) {
  const CompletionRequest req = parse_completion_request(
      R"({"prompt": "Hi", "stream": true, "stream_options": {"include_usage": true}})",
      testing::context());
  CompletionResponseBuilder b(req, &testing::tokenizer());
  auto chunks = b.stream_chunks(0, update(0, {5}, "Once"));
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0]["object"], "text_completion");
  EXPECT_EQ(chunks[0]["choices"][0]["text"], "Once");
  EXPECT_TRUE(chunks[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(b.stream_chunks(0, update(0, {}, "")).empty());  // nothing new: nothing to send
  chunks = b.stream_chunks(0, update(0, {6}, " upon", FinishReason::kLength));
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0]["choices"][0]["text"], " upon");
  EXPECT_EQ(chunks[0]["choices"][0]["finish_reason"], "length");
  const Json usage = b.usage_chunk();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_FALSE(usage["usage"].contains("prompt_tokens_details"));
}

TEST(ChatResponseTest, StreamRoleContentFinishUsage) {
  const ChatRequest req = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true, "n": 2,
          "stream_options": {"include_usage": true}, "max_tokens": 5})",
      testing::context());
  ChatResponseBuilder b(req, &testing::tokenizer());
  const auto start = b.start_chunks();
  ASSERT_EQ(start.size(), 2u);
  EXPECT_EQ(start[1]["object"], "chat.completion.chunk");
  EXPECT_EQ(start[1]["choices"][0]["index"], 1);
  EXPECT_EQ(start[1]["choices"][0]["delta"], Json({{"role", "assistant"}, {"content", ""}}));
  auto chunks = b.stream_chunks(update(0, {5}, "Hello"));
  ASSERT_EQ(chunks.size(), 1u);  // the role chunk went out already
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], Json({{"content", "Hello"}}));
  chunks = b.stream_chunks(update(1, {6}, "Yo", FinishReason::kStop, "13"));
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["content"], "Yo");
  EXPECT_TRUE(chunks[1]["choices"][0]["delta"].empty());
  EXPECT_EQ(chunks[1]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chunks[1]["choices"][0]["stop_reason"], "13");
  const Json usage = b.usage_chunk();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], req.engine_request.prompt_token_ids.size());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_THAT(sse_event(chunks[1]), ::testing::StartsWith("data: {\"id\":\"chatcmpl-"));
  EXPECT_THAT(sse_event(chunks[1]), ::testing::EndsWith("}\n\n"));
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(ChatResponseTest, RoleChunkIsSentOnceWithoutStartChunks) {
  const ChatRequest req = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true, "max_tokens": 5})",
      testing::context());
  ChatResponseBuilder b(req, &testing::tokenizer());
  auto chunks = b.stream_chunks(update(0, {5}, "A"));
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(b.stream_chunks(update(0, {6}, "B")).size(), 1u);
}

TEST(ChatResponseTest, WholeResponseWithLogprobs) {
  const ChatRequest req = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true, "top_logprobs": 2,
          "max_tokens": 5})",
      testing::context());
  ChatResponseBuilder b(req, &testing::tokenizer());
  RequestOutput a = update(0, {400}, "x");
  a.logprobs = {{400, -0.25f, {{400, -0.25f}, {401, -2.0f}, {402, -3.0f}}}};
  b.add(a);
  b.add(update(0, {}, "", FinishReason::kLength));
  const Json body = b.response();
  EXPECT_EQ(body["object"], "chat.completion");
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["message"], Json({{"role", "assistant"}, {"content", "x"}}));
  EXPECT_EQ(choice["finish_reason"], "length");
  const Json& entry = choice["logprobs"]["content"][0];
  // Id 400 is the word-initial piece "▁do": its text inside a completion is " do" (decoding it
  // alone would strip the space, and the tokens would no longer join into the text).
  ASSERT_EQ(testing::tokenizer().id_to_token(400), "\u2581do");
  const std::string token = " do";
  EXPECT_EQ(entry["token"], token);
  EXPECT_DOUBLE_EQ(entry["logprob"].get<double>(), -0.25);
  ASSERT_EQ(entry["bytes"].size(), token.size());
  EXPECT_EQ(entry["bytes"][0], static_cast<unsigned char>(token[0]));
  ASSERT_EQ(entry["top_logprobs"].size(), 2u);
  EXPECT_DOUBLE_EQ(entry["top_logprobs"][1]["logprob"].get<double>(), -2.0);
  EXPECT_EQ(body["usage"]["completion_tokens"], 1);
}

TEST(EndpointsTest, Models) {
  const Json body = models_response(testing::context());
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_EQ(body["data"][0]["id"], "stories260K");
  EXPECT_EQ(body["data"][0]["object"], "model");
  EXPECT_EQ(body["data"][0]["owned_by"], "pagoda");
  EXPECT_EQ(body["data"][0]["max_model_len"], 512);
  EXPECT_EQ(body["data"][1]["id"], "alias");
}

TEST(EndpointsTest, TokenizeAndDetokenize) {
  const ServerContext ctx = testing::context();
  const Json t = tokenize_response(R"({"prompt": "Once upon a time"})", ctx);
  const auto ids = testing::tokenizer().encode("Once upon a time", true);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), ids);
  EXPECT_EQ(t["count"], ids.size());
  EXPECT_EQ(t["max_model_len"], 512);
  EXPECT_TRUE(t["token_strs"].is_null());
  const Json no_bos = tokenize_response(
      R"({"prompt": "Once", "add_special_tokens": false, "return_token_strs": true})", ctx);
  EXPECT_NE(no_bos["tokens"][0], 1);
  EXPECT_EQ(no_bos["token_strs"].size(), no_bos["tokens"].size());
  const Json chat =
      tokenize_response(R"({"messages": [{"role": "user", "content": "Hello"}]})", ctx);
  EXPECT_EQ(chat["tokens"].get<std::vector<int32_t>>(),
            testing::tokenizer().encode(
                "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                "assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
                false));
  const Json d = detokenize_response(R"({"tokens": )" + t["tokens"].dump() + "}", ctx);
  EXPECT_EQ(d["prompt"], testing::tokenizer().decode(ids, false));
  EXPECT_TRUE(version_response()["version"].is_string());
}

}  // namespace
}  // namespace pagoda::openai
