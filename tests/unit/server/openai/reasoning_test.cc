// Reasoning in chat output (--reasoning-parser): the splitter on its own, fed whole and in every
// cut, and the chat responses built with it, streamed and whole, with and without tool calls.
// The demo model writes no <think>, so engine updates carry a reasoning model's text.
#include <gtest/gtest.h>

#include "server/openai/chat_response.h"
#include "server/openai/reasoning_parser.h"
#include "server/openai/tool_parser.h"
#include "test_util.h"

namespace pagoda::openai {
namespace {

struct Split {
  std::string reasoning, content;
  bool operator==(const Split&) const = default;
};

// The text fed in pieces of `step` bytes (0: whole).
Split split(const std::string& format, const std::string& text, size_t step) {
  const ReasoningFormat f = reasoning_format(format);
  ReasoningSplitter s(f);
  Split out;
  const size_t n = step == 0 ? text.size() : step;
  for (size_t at = 0; at < text.size(); at += n) {
    const ReasoningSplitter::Delta d = s.add(std::string_view(text).substr(at, n));
    out.reasoning += d.reasoning;
    out.content += d.content;
  }
  const ReasoningSplitter::Delta d = s.finish();
  out.reasoning += d.reasoning;
  out.content += d.content;
  return out;
}

TEST(ReasoningSplitter, FormatsAndEveryCutAgree) {
  struct Case {
    const char* format;
    std::string text;
    Split expected;
  } cases[] = {
      {"qwen3",
       "<think>\nWhy? Because.\n</think>\n\nIt is 4.",
       {"\nWhy? Because.\n", "\n\nIt is 4."}},
      {"qwen3", "No tags at all, < and </ too.", {"", "No tags at all, < and </ too."}},
      {"qwen3", "<think>cut by max_tokens", {"cut by max_tokens", ""}},
      {"qwen3", "<think>\n\n</think>\n\nEmpty thought.", {"\n\n", "\n\nEmpty thought."}},
      {"deepseek_r1", "Let me think.</think>The answer.", {"Let me think.", "The answer."}},
      {"deepseek_r1", "<think>Opened anyway.</think>Done", {"Opened anyway.", "Done"}},
      {"deepseek_r1", "Never closed <thin", {"Never closed <thin", ""}},
      {"deepseek_r1", "</think>", {"", ""}},
  };
  for (const Case& c : cases) {
    for (size_t step : {0, 1, 2, 3, 5, 8}) {
      SCOPED_TRACE(::testing::Message() << c.format << " step " << step << ": " << c.text);
      EXPECT_EQ(split(c.format, c.text, step), c.expected);
    }
  }
}

TEST(ReasoningSplitter, UnknownNameListsTheKnownOnes) {
  try {
    (void)reasoning_format("granite");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("deepseek_r1, qwen3"), std::string::npos);
  }
}

using testing::text_update;

struct Streamed {
  std::string reasoning, content;
  std::vector<Json> calls;
  Json finish_reason;
};

Streamed stream(const ChatRequest& req, const std::string& text, size_t step) {
  ChatResponseBuilder b(req, &testing::tokenizer());
  std::vector<Json> chunks = b.start_chunks();
  for (size_t at = 0; at < text.size(); at += step) {
    const bool last = at + step >= text.size();
    for (Json& c : b.stream_chunks(text_update(
             text.substr(at, step), last ? std::optional(FinishReason::kStop) : std::nullopt)))
      chunks.push_back(std::move(c));
  }
  Streamed s;
  for (const Json& c : chunks) {
    const Json& delta = c["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) {
      // vLLM's current name beside the older one, equal.
      EXPECT_EQ(delta["reasoning"], delta["reasoning_content"]);
      s.reasoning += delta["reasoning_content"].get<std::string>();
    }
    if (delta.contains("content")) s.content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls")) s.calls.push_back(delta["tool_calls"][0]);
  }
  s.finish_reason = chunks.back()["choices"][0]["finish_reason"];
  return s;
}

Json whole(const ChatRequest& req, const std::string& text) {
  ChatResponseBuilder b(req, &testing::tokenizer());
  b.add(text_update(text.substr(0, text.size() / 3)));
  b.add(text_update(text.substr(text.size() / 3), FinishReason::kStop));
  return b.response()["choices"][0];
}

TEST(ChatReasoning, StreamedAndWholeAnswersSplitAlike) {
  const ReasoningFormat format = reasoning_format("qwen3");
  ServerContext ctx = testing::context();
  ctx.reasoning = &format;
  const ChatRequest req =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "2+2?"}]})", ctx);
  const std::string text = "<think>\nTwo and two.\n</think>\n\n4";
  const Json choice = whole(req, text);
  EXPECT_EQ(choice["message"]["reasoning_content"], "\nTwo and two.\n");
  EXPECT_EQ(choice["message"]["reasoning"], "\nTwo and two.\n");
  EXPECT_EQ(choice["message"]["content"], "\n\n4");
  for (size_t step : {1, 4, 100}) {
    const Streamed s = stream(req, text, step);
    EXPECT_EQ(s.reasoning, "\nTwo and two.\n") << step;
    EXPECT_EQ(s.content, "\n\n4") << step;
  }
  // Without reasoning: null, and all of it content.
  const Json plain = whole(req, "Just 4.");
  EXPECT_TRUE(plain["message"]["reasoning_content"].is_null());
  EXPECT_TRUE(plain["message"]["reasoning"].is_null());
  EXPECT_EQ(plain["message"]["content"], "Just 4.");
  // Nothing after the reasoning: content null, as vLLM.
  EXPECT_TRUE(whole(req, "<think>hm</think>")["message"]["content"].is_null());
  // Without --reasoning-parser the field is absent and the tags stay in the content.
  const ChatRequest bare = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "2+2?"}]})", testing::context());
  const Json untouched = whole(bare, text);
  EXPECT_FALSE(untouched["message"].contains("reasoning_content"));
  EXPECT_EQ(untouched["message"]["content"], text);
}

TEST(ChatReasoning, ToolCallsAreParsedFromTheContentOnly) {
  const ReasoningFormat format = reasoning_format("qwen3");
  std::unique_ptr<ToolParser> parser = make_tool_parser("hermes");
  ServerContext ctx = testing::context();
  ctx.reasoning = &format;
  ctx.tool_parser = parser.get();
  const std::string body = R"({"messages": [{"role": "user", "content": "Weather?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather"}}])";
  // A call inside the reasoning is thought, not a call; the one after it is.
  const std::string text =
      "<think>Maybe <tool_call>{\"name\": \"nope\"}</tool_call>?</think>\n\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  const Json choice = whole(parse_chat_request(body + "}", ctx), text);
  EXPECT_EQ(choice["message"]["reasoning_content"],
            "Maybe <tool_call>{\"name\": \"nope\"}</tool_call>?");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const Streamed s = stream(parse_chat_request(body + R"(, "stream": true})", ctx), text, 6);
  EXPECT_EQ(s.reasoning, choice["message"]["reasoning_content"].get<std::string>());
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(s.finish_reason, "tool_calls");
}

}  // namespace
}  // namespace pagoda::openai
