// Tool calls in chat responses: a ServerContext with a tool parser (as --enable-auto-tool-choice
// --tool-call-parser sets it) and engine updates whose text is a model's tool call output, since
// the demo model cannot write one. To add a case, parse a request with tools, feed updates, and
// compare message.tool_calls / delta.tool_calls.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/openai/api_error.h"
#include "server/openai/chat_response.h"
#include "server/openai/tool_parser.h"
#include "test_util.h"

namespace pagoda::openai {
namespace {

using ::testing::MatchesRegex;

constexpr const char* kTools = R"("tools": [{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";
constexpr const char* kCall =
    "I will check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Zürich\"}}\n</tool_call>";

struct Fixture {
  std::unique_ptr<ToolParser> parser = make_tool_parser("hermes");
  ServerContext ctx = testing::context();
  Fixture() { ctx.tool_parser = parser.get(); }

  ChatRequest request(const std::string& extra) const {
    return parse_chat_request(R"({"messages": [{"role": "user", "content": "Weather?"}], )" +
                                  std::string(kTools) + extra + "}",
                              ctx);
  }
};

using testing::text_update;

Json whole_response(const ChatRequest& req, const std::string& text) {
  ChatResponseBuilder b(req, &testing::tokenizer());
  b.add(text_update(text.substr(0, text.size() / 2)));
  b.add(text_update(text.substr(text.size() / 2), FinishReason::kStop));
  return b.response();
}

TEST(ChatToolCallsTest, WholeResponseCarriesParsedCalls) {
  Fixture f;
  const ChatRequest req = f.request("");  // tool_choice unset: auto
  ASSERT_NE(req.tool_parser, nullptr);
  EXPECT_FALSE(req.engine_request.params.skip_special_tokens);  // the marker may be special
  const Json choice = whole_response(req, kCall)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "I will check.\n");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_THAT(call["id"].get<std::string>(), MatchesRegex("chatcmpl-tool-[0-9a-f]{32}"));
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city": "Zürich"})");
}

TEST(ChatToolCallsTest, CallsOnlyLeaveContentNull) {
  Fixture f;
  const Json message =
      whole_response(f.request(R"(, "tool_choice": "auto")"),
                     R"(<tool_call>{"name": "get_weather"}</tool_call>)")["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{}");
}

TEST(ChatToolCallsTest, OutputStaysContentWhenNotParsed) {
  Fixture f;
  // Malformed calls, tool_choice "none", no tools, or no parser: plain text.
  Json choice = whole_response(f.request(""), "<tool_call>{oops</tool_call>")["choices"][0];
  EXPECT_EQ(choice["message"]["content"], "<tool_call>{oops</tool_call>");
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_EQ(choice["finish_reason"], "stop");
  const ChatRequest none = f.request(R"(, "tool_choice": "none")");
  EXPECT_EQ(none.tool_parser, nullptr);
  EXPECT_FALSE(none.engine_request.params.structured_outputs);
  choice = whole_response(none, kCall)["choices"][0];
  EXPECT_EQ(choice["message"]["content"], kCall);
  EXPECT_EQ(choice["finish_reason"], "stop");
  const ChatRequest no_tools =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}]})", f.ctx);
  EXPECT_EQ(no_tools.tool_parser, nullptr);
  // Without a parser, tool_choice "auto" is a 400 as in vLLM (the output could not be parsed);
  // "none" is answered with content.
  const std::string body =
      R"({"messages": [{"role": "user", "content": "Hi"}], )" + std::string(kTools);
  try {
    (void)parse_chat_request(body + "}", testing::context());
    ADD_FAILURE() << "tools with tool_choice auto and no parser were accepted";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().status, 400);
    EXPECT_EQ(e.error().param, "tool_choice");
    EXPECT_NE(e.error().message.find("--enable-auto-tool-choice"), std::string::npos);
  }
  const ChatRequest no_parser =
      parse_chat_request(body + R"(, "tool_choice": "none"})", testing::context());
  EXPECT_EQ(no_parser.tool_parser, nullptr);
  EXPECT_TRUE(no_parser.engine_request.params.skip_special_tokens);
}

TEST(ChatToolCallsTest, RequiredAndNamedToolChoiceConstrainAndParseTheOutput) {
  // Whatever the server's parser (here hermes, and none): the output is the calls' JSON.
  for (const bool with_parser : {true, false}) {
    Fixture f;
    if (!with_parser) f.ctx.tool_parser = nullptr;
    const ChatRequest required = f.request(R"(, "tool_choice": "required")");
    ASSERT_NE(required.tool_parser, nullptr);
    ASSERT_TRUE(required.engine_request.params.structured_outputs);
    const Json schema = Json::parse(*required.engine_request.params.structured_outputs->json);
    EXPECT_EQ(schema["type"], "array");
    EXPECT_EQ(schema["minItems"], 1);
    Json choice = whole_response(
        required, R"([{"name": "get_weather", "parameters": {"city": "Zürich"}}])")["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    EXPECT_TRUE(choice["message"]["content"].is_null());
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"city": "Zürich"})");

    const ChatRequest named =
        f.request(R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
    ASSERT_NE(named.tool_parser, nullptr);
    const Json params = Json::parse(*named.engine_request.params.structured_outputs->json);
    EXPECT_EQ(params["properties"]["city"]["type"], "string");
    choice = whole_response(named, R"({"city":"Bern"})")["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop");  // vLLM and OpenAI: a forced function stops
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"city": "Bern"})");
    // Cut by max_tokens: the text stays content.
    choice = whole_response(named, R"({"city": "Be)")["choices"][0];
    EXPECT_EQ(choice["message"]["content"], R"({"city": "Be)");
    EXPECT_FALSE(choice["message"].contains("tool_calls"));
  }
}

TEST(ChatToolCallsTest, StrictToolsUnderAutoGetAStructuralTag) {
  Fixture f;
  f.ctx.max_model_len = 1 << 20;
  const std::string strict_tools =
      R"("tools": [{"type": "function", "function": {"name": "get_weather", "strict": true,
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "other"}}])";
  const ChatRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Weather?"}], )" + strict_tools + "}", f.ctx);
  ASSERT_TRUE(r.engine_request.params.structured_outputs);
  const Json tag = Json::parse(*r.engine_request.params.structured_outputs->structural_tag);
  EXPECT_EQ(tag["triggers"], Json::array({"<tool_call>"}));
  EXPECT_EQ(tag["structures"][0]["begin"],
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ");
  EXPECT_EQ(tag["structures"][0]["schema"]["required"], Json::array({"city"}));
  EXPECT_EQ(tag["structures"][1]["schema"]["additionalProperties"], true);
  EXPECT_EQ(tag["structures"][0]["end"], "}\n</tool_call>");
  // Without strict tools, or with another constraint, there is no tag.
  EXPECT_FALSE(f.request("").engine_request.params.structured_outputs);
}

TEST(ChatToolCallsTest, StreamSendsContentThenToolCallDeltas) {
  Fixture f;
  const ChatRequest req = f.request(R"(, "stream": true)");
  ChatResponseBuilder b(req, &testing::tokenizer());
  std::vector<Json> chunks = b.start_chunks();
  const std::string text = kCall;
  for (size_t at = 0; at < text.size(); at += 7) {
    const bool last = at + 7 >= text.size();
    for (Json& c : b.stream_chunks(text_update(
             text.substr(at, 7), last ? std::optional(FinishReason::kStop) : std::nullopt))) {
      chunks.push_back(std::move(c));
    }
  }
  std::string content;
  std::vector<Json> calls;
  for (const Json& c : chunks) {
    const Json& delta = c["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls")) calls.push_back(delta["tool_calls"][0]);
  }
  EXPECT_EQ(content, "I will check.\n");  // the same as the whole response's content
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_THAT(calls[0]["id"].get<std::string>(), MatchesRegex("chatcmpl-tool-[0-9a-f]{32}"));
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city": "Zürich"})");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(chunks.back()["choices"][0]["delta"].empty());
}

TEST(ChatToolCallsTest, StreamReleasesHeldTextThatIsNoCall) {
  Fixture f;
  const ChatRequest req = f.request(R"(, "stream": true)");
  ChatResponseBuilder b(req, &testing::tokenizer());
  std::string content;
  for (const char* piece : {"a <tool", "_call> {bad"}) {
    for (const Json& c : b.stream_chunks(text_update(piece))) {
      content += c["choices"][0]["delta"].value("content", "");
    }
  }
  EXPECT_EQ(content, "a ");
  const std::vector<Json> tail = b.stream_chunks(text_update(" json", FinishReason::kLength));
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0]["choices"][0]["delta"]["content"], "<tool_call> {bad json");
  EXPECT_EQ(tail[1]["choices"][0]["finish_reason"], "length");
}

}  // namespace
}  // namespace pagoda::openai
