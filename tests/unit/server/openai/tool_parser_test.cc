// The tool call parsers (hermes, llama3_json, mistral) on hand-written model outputs. To add a
// case, call extract() on the output text and compare names, arguments and content; a format's
// malformed variants must come back as content (no calls).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/status.h"
#include "server/openai/tool_parser.h"
#include "server/openai/tool_parser_common.h"

namespace pagoda::openai {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

ExtractedToolCalls extract(std::string_view parser, std::string_view text) {
  return make_tool_parser(parser)->extract(text);
}

void expect_content_only(std::string_view parser, std::string_view text) {
  const ExtractedToolCalls r = extract(parser, text);
  EXPECT_TRUE(r.calls.empty()) << text;
  EXPECT_EQ(r.content, std::string(text));
}

TEST(ToolParserTest, RegistryNamesTheKnownParsers) {
  EXPECT_THAT(tool_parser_names(), ::testing::ElementsAre("hermes", "llama3_json", "mistral"));
  try {
    (void)make_tool_parser("qwen");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'qwen'"));
    EXPECT_THAT(e.what(), HasSubstr("hermes, llama3_json, mistral"));
  }
}

TEST(ToolParserTest, HermesOneCall) {
  const ExtractedToolCalls r = extract(
      "hermes",
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
      "3}}\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city": "Paris", "days": 3})");
  EXPECT_THAT(r.calls[0].id, MatchesRegex("chatcmpl-tool-[0-9a-f]{32}"));
  EXPECT_FALSE(r.content.has_value());  // null, not ""
}

TEST(ToolParserTest, HermesSeveralCallsAfterText) {
  const ExtractedToolCalls r =
      extract("hermes",
              "Let me look both up.\n"
              "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
              "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": [1, "
              "2.5, null, true]}}</tool_call>");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "Let me look both up.\n");
  EXPECT_EQ(r.calls[0].name, "a");
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_EQ(r.calls[1].name, "b");
  EXPECT_EQ(r.calls[1].arguments, R"({"x": [1, 2.5, null, true]})");
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
}

TEST(ToolParserTest, HermesLastBlockMayStayOpen) {
  const ExtractedToolCalls r =
      extract("hermes", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": 1}}\n");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"q": 1})");
}

TEST(ToolParserTest, HermesMalformedFallsBackToContent) {
  expect_content_only("hermes", "no calls here");
  expect_content_only("hermes", "<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>");
  expect_content_only("hermes", "<tool_call>{\"arguments\": {}}</tool_call>");  // no name
  expect_content_only("hermes", "<tool_call>{\"name\": 7}</tool_call>");
  expect_content_only("hermes", "<tool_call>[1, 2]</tool_call>");
  // One bad block spoils all: the non-streamed and streamed answers must agree on it.
  expect_content_only("hermes",
                      "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>oops</tool_call>");
  expect_content_only("hermes", "<tool_call>");
}

TEST(ToolParserTest, UnicodeArgumentsStayUtf8) {
  const ExtractedToolCalls r =
      extract("hermes",
              "<tool_call>{\"name\": \"translate\", \"arguments\": {\"text\": \"Zürich 東京 😀\", "
              "\"escaped\": \"\\u00e9\\n\\\"q\\\"\"}}</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  // json.dumps(..., ensure_ascii=False): non-ASCII as is, control characters and quotes escaped.
  EXPECT_EQ(r.calls[0].arguments, R"({"text": "Zürich 東京 😀", "escaped": "é\n\"q\""})");
}

TEST(ToolParserTest, ArgumentsAsObjectOrString) {
  // An object is written as JSON text; a string is taken as JSON text already (OpenAI's form).
  const ExtractedToolCalls object =
      extract("hermes", R"(<tool_call>{"name": "f", "arguments": {"b": 1, "a": 2}}</tool_call>)");
  ASSERT_EQ(object.calls.size(), 1u);
  EXPECT_EQ(object.calls[0].arguments, R"({"b": 1, "a": 2})");  // key order kept
  const ExtractedToolCalls string = extract(
      "hermes", R"(<tool_call>{"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}</tool_call>)");
  ASSERT_EQ(string.calls.size(), 1u);
  EXPECT_EQ(string.calls[0].arguments, R"({"b": 1, "a": 2})");
}

TEST(ToolParserTest, Llama3JsonParametersAndPythonTag) {
  ExtractedToolCalls r =
      extract("llama3_json", R"({"name": "get_weather", "parameters": {"city": "Oslo"}})");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_FALSE(r.content.has_value());
  r = extract("llama3_json", R"(<|python_tag|>{"name": "f", "arguments": {"x": "é"}})");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"x": "é"})");
}

TEST(ToolParserTest, Llama3JsonSeveralCalls) {
  const ExtractedToolCalls r =
      extract("llama3_json",
              R"({"name": "a", "parameters": {"s": "x; y {"}}; {"name": "b", "parameters": {}})");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, R"({"s": "x; y {"})");  // brackets in strings do not count
  EXPECT_EQ(r.calls[1].name, "b");
}

TEST(ToolParserTest, Llama3JsonMalformedFallsBackToContent) {
  expect_content_only("llama3_json", "The weather in Oslo is fine.");
  expect_content_only("llama3_json", "Sure: {\"name\": \"f\", \"parameters\": {}}");
  expect_content_only("llama3_json", R"({"name": "f", "parameters": {)");
  expect_content_only("llama3_json", R"({"answer": 42})");
  expect_content_only("llama3_json", R"({"name": "f", "parameters": {}} and then some text)");
  expect_content_only("llama3_json", R"({"name": "f", "parameters": {}}; {"name": )");
}

TEST(ToolParserTest, MistralArrayAfterText) {
  const ExtractedToolCalls r = extract(
      "mistral",
      R"(Checking. [TOOL_CALLS] [{"name": "a", "arguments": {"n": 1}}, {"name": "b", "arguments": {}}])");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "Checking. ");
  EXPECT_EQ(r.calls[0].name, "a");
  EXPECT_EQ(r.calls[0].arguments, R"({"n": 1})");
  EXPECT_EQ(r.calls[1].name, "b");
  EXPECT_THAT(r.calls[0].id, MatchesRegex("[A-Za-z0-9]{9}"));
}

TEST(ToolParserTest, MistralCallsOnly) {
  const ExtractedToolCalls r =
      extract("mistral", R"([TOOL_CALLS][{"name": "f", "arguments": {"city": "Kraków"}}])");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_FALSE(r.content.has_value());
  EXPECT_EQ(r.calls[0].arguments, R"({"city": "Kraków"})");
}

TEST(ToolParserTest, MistralMalformedFallsBackToContent) {
  expect_content_only("mistral", "plain answer [with brackets]");
  expect_content_only("mistral", R"([TOOL_CALLS] [{"name": "f", "arguments": {]])");
  expect_content_only("mistral", R"([TOOL_CALLS] [{"arguments": {}}])");
  expect_content_only("mistral", "[TOOL_CALLS] []");
  expect_content_only("mistral", "[TOOL_CALLS] not json");
}

TEST(ToolParserTest, JsonValueEndAndPartialMarkers) {
  EXPECT_EQ(json_value_end(R"({"a": "}"} tail)", 0), 10u);
  EXPECT_EQ(json_value_end(R"([{"a": "\"]"}])", 0), 14u);
  EXPECT_EQ(json_value_end(R"({"a": 1)", 0), std::string_view::npos);
  EXPECT_EQ(partial_marker_length("text <tool", "<tool_call>"), 5u);
  EXPECT_EQ(partial_marker_length("text <tool_call>", "<tool_call>"), 0u);  // whole: not partial
  EXPECT_EQ(content_before_marker("ab<tool_call>cd", "<tool_call>"), 2u);
  EXPECT_EQ(content_before_marker("ab <", "<tool_call>"), 3u);
}

}  // namespace
}  // namespace pagoda::openai
