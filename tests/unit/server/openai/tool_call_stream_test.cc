// Streaming tool calls: every output, cut into random chunks and fed to a ToolCallStream, must
// assemble into the content and calls that the parser finds in the whole text. To add a case,
// add an output to kOutputs under its parser.
#include <random>

#include <gtest/gtest.h>

#include "server/openai/tool_call_stream.h"

namespace pagoda::openai {
namespace {

struct Output {
  const char* parser;
  const char* text;
};

constexpr Output kOutputs[] = {
    {"hermes", "Just text, no calls at all < not a tag <tool"},
    {"hermes", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"東京\"}}\n</tool_call>"},
    {"hermes",
     "Let me check <tool>s. <tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
     "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": 1}}</tool_call>"},
    {"hermes", "Text then <tool_call>{\"name\": \"broken\", \"arguments\": {</tool_call> more"},
    {"hermes", "<tool_call>{\"name\": \"open\", \"arguments\": {\"y\": 2}}"},
    {"llama3_json", "{\"name\": \"f\", \"parameters\": {\"city\": \"Zürich\"}}"},
    {"llama3_json",
     "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
     "\"parameters\": {\"k\": [1, 2]}}"},
    {"llama3_json", "  The answer is 42."},
    {"llama3_json", "<|python_ta no, just text"},
    {"llama3_json", "{\"not\": \"a call\"}"},
    {"mistral", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": \"ü\"}}]"},
    {"mistral", "First [TOOL] text [TOOL_CALLS][{\"name\": \"g\", \"arguments\": {}}]"},
    {"mistral", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": "},
    {"mistral", "no calls [TOOL_CALL"},
};

struct Assembled {
  std::string content;
  std::vector<ToolCall> calls;
};

Assembled stream(const ToolParser& parser, std::string_view text, std::mt19937& rng) {
  ToolCallStream s(parser);
  Assembled a;
  for (size_t at = 0; at < text.size();) {
    const size_t n = std::min<size_t>(text.size() - at, 1 + rng() % 6);
    a.content += s.add(text.substr(at, n));
    at += n;
  }
  ExtractedToolCalls tail = s.finish();
  a.content += tail.content.value_or("");
  a.calls = std::move(tail.calls);
  return a;
}

TEST(ToolCallStreamTest, RandomChunkingsAssembleToTheWholeParse) {
  std::mt19937 rng(1234);
  for (const Output& o : kOutputs) {
    const auto parser = make_tool_parser(o.parser);
    const ExtractedToolCalls whole = parser->extract(o.text);
    const std::string whole_content = whole.content.value_or("");
    for (int round = 0; round < 50; ++round) {
      const Assembled a = stream(*parser, o.text, rng);
      ASSERT_EQ(a.content, whole_content) << o.parser << ": " << o.text;
      ASSERT_EQ(a.calls.size(), whole.calls.size()) << o.text;
      for (size_t i = 0; i < a.calls.size(); ++i) {
        EXPECT_EQ(a.calls[i].name, whole.calls[i].name);
        EXPECT_EQ(a.calls[i].arguments, whole.calls[i].arguments);
      }
    }
  }
}

TEST(ToolCallStreamTest, ContentBeforeAMarkerIsNotHeldBack) {
  const auto hermes = make_tool_parser("hermes");
  ToolCallStream s(*hermes);
  EXPECT_EQ(s.add("Hello "), "Hello ");
  EXPECT_EQ(s.add("there <tool"), "there ");  // "<tool" may become "<tool_call>"
  EXPECT_EQ(s.add("box> and"), "<toolbox> and");
  EXPECT_EQ(s.add(" <tool_call>{\"name\""), " ");
  EXPECT_EQ(s.add(": \"f\"}</tool_call>"), "");
  const ExtractedToolCalls tail = s.finish();
  ASSERT_EQ(tail.calls.size(), 1u);
  EXPECT_EQ(tail.calls[0].arguments, "{}");
  EXPECT_EQ(tail.content, "");
}

TEST(ToolCallStreamTest, Llama3JsonDecidesAtTheStart) {
  const auto llama = make_tool_parser("llama3_json");
  ToolCallStream text(*llama);
  EXPECT_EQ(text.add(" "), "");  // may still be followed by "{"
  EXPECT_EQ(text.add("Hi"), " Hi");
  EXPECT_EQ(text.add(" {x}"), " {x}");
  ToolCallStream call(*llama);
  EXPECT_EQ(call.add("{\"name\": \"f\", "), "");
  EXPECT_EQ(call.add("\"parameters\": {}}"), "");
  EXPECT_EQ(call.finish().calls.size(), 1u);
}

}  // namespace
}  // namespace pagoda::openai
