// Structured-output fields of request bodies: structured_outputs, guided_*, response_format, and
// their errors (a 400 naming the field, with the position inside the schema or grammar). More
// malformed bodies are in tests/server/malformed_requests.json. To add a case: a body and the
// StructuredOutputsParams (or the error) it must give.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/openai/api_error.h"
#include "server/openai/chat_request.h"
#include "server/openai/completion_request.h"
#include "server/openai/json_body.h"
#include "server/openai/reasoning_parser.h"
#include "test_util.h"

namespace pagoda::openai {
namespace {

using ::testing::HasSubstr;

StructuredOutputsParams completion_params(const std::string& fields) {
  const CompletionRequest r =
      parse_completion_request(R"({"prompt": "Hi", )" + fields + "}", testing::context());
  const auto& so = r.engine_requests.at(0).params.structured_outputs;
  EXPECT_TRUE(so.has_value()) << fields;
  return so.value_or(StructuredOutputsParams{});
}

ApiError error_of(const std::string& fields, bool chat = false) {
  try {
    if (chat) {
      (void)parse_chat_request(
          R"({"messages": [{"role": "user", "content": "Hi"}], )" + fields + "}",
          testing::context());
    } else {
      (void)parse_completion_request(R"({"prompt": "Hi", )" + fields + "}", testing::context());
    }
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "no error for " << fields;
  return {};
}

TEST(StructuredRequestTest, EveryFieldGivesItsConstraint) {
  StructuredOutputsParams so =
      completion_params(R"("structured_outputs": {"json": {"type": "object",
      "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}, "disable_any_whitespace": true})");
  // The schema keeps its key order (properties come out in the declared order).
  EXPECT_EQ(*so.json,
            R"({"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}})");
  EXPECT_TRUE(so.disable_any_whitespace);
  EXPECT_EQ(*completion_params(R"("structured_outputs": {"regex": "[a-z]+"})").regex, "[a-z]+");
  EXPECT_EQ(*completion_params(R"("structured_outputs": {"choice": ["a", "b"]})").choice,
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(completion_params(R"("structured_outputs": {"grammar": "root ::= \"x\""})").grammar);
  EXPECT_TRUE(completion_params(R"("structured_outputs": {"json_object": true})").json_object);
  EXPECT_TRUE(completion_params(R"("guided_json": "{\"type\": \"integer\"}")").json);
  EXPECT_TRUE(
      completion_params(R"("guided_regex": "a+", "guided_decoding_backend": "xgrammar")").regex);
  EXPECT_TRUE(completion_params(R"("guided_choice": ["x"])").choice);
  EXPECT_TRUE(completion_params(R"("guided_grammar": "root ::= [0-9]+")").grammar);
  EXPECT_EQ(
      *completion_params(R"("guided_json": {"type": "object"}, "guided_whitespace_pattern": " ?")")
           .whitespace_pattern,
      " ?");
  EXPECT_TRUE(completion_params(R"("response_format": {"type": "json_object"})").json_object);
  EXPECT_EQ(*completion_params(R"("response_format": {"type": "json_schema", "json_schema":
      {"name": "x", "strict": true, "schema": {"type": "boolean"}}})")
                 .json,
            R"({"type":"boolean"})");
  EXPECT_TRUE(completion_params(R"("response_format": {"type": "structural_tag", "structures":
      [{"begin": "<f>", "schema": {"type": "object"}, "end": "</f>"}], "triggers": ["<f>"]})")
                  .structural_tag);
  so = completion_params(R"("structured_outputs": {"json": {"type": "object"},
      "disable_additional_properties": false})");
  EXPECT_EQ(so.disable_additional_properties, false);
  // Options only: they apply to the constraint of another field.
  so = completion_params(R"("response_format": {"type": "json_object"},
      "structured_outputs": {"disable_any_whitespace": true})");
  EXPECT_TRUE(so.json_object);
  EXPECT_TRUE(so.disable_any_whitespace);
}

TEST(StructuredRequestTest, ChatWithAReasoningParserStartsAfterTheReasoning) {
  ServerContext ctx = testing::context();
  const ReasoningFormat format = reasoning_format("qwen3");
  ctx.reasoning = &format;
  const ChatRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "guided_regex": "[0-9]+"})", ctx);
  const auto& so = *r.engine_request.params.structured_outputs;
  EXPECT_EQ(so.reasoning_start, "<think>");
  EXPECT_EQ(so.reasoning_end, "</think>");
}

TEST(StructuredRequestTest, ErrorsNameTheFieldAndThePosition) {
  ApiError e = error_of(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x",
      "schema": {"type": "object", "properties": {"a": {"type": "string", "format": "ipv6"}}}}})");
  EXPECT_EQ(e.param, "response_format");
  EXPECT_THAT(e.message, HasSubstr("at /properties/a/format: unsupported string format 'ipv6'"));
  e = error_of(R"("guided_grammar": "root ::= \"a\" b")", true);
  EXPECT_EQ(e.param, "guided_grammar");
  EXPECT_THAT(e.message, HasSubstr("line 1, column 14: undefined rule 'b'"));
  e = error_of(R"("guided_regex": "(a")");
  EXPECT_EQ(e.param, "guided_regex");
  EXPECT_THAT(e.message, HasSubstr("regex: at offset 0"));
  e = error_of(R"("structured_outputs": {"json": {}, "backend": "x"})");
  EXPECT_EQ(e.param, "structured_outputs.backend");
  EXPECT_THAT(e.message, HasSubstr("backend"));
  e = error_of(R"("structured_outputs": {"regex": "a", "choice": ["b"]})");
  EXPECT_EQ(e.param, "structured_outputs");
  e = error_of(R"("guided_regex": "a", "guided_choice": ["b"])");
  EXPECT_EQ(e.param, "guided_choice");
  e = error_of(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})");
  EXPECT_EQ(e.param, "response_format");
  e = error_of(R"("response_format": {"type": "xml"})");
  EXPECT_EQ(e.param, "response_format");
  e = error_of(R"("response_format": {"type": "json_object", "json_schema": {}})");
  EXPECT_EQ(e.param, "response_format.json_schema");
  e = error_of(R"("structured_outputs": {"regex": "a", "disable_any_whitespace": true})");
  EXPECT_THAT(e.message, HasSubstr("JSON output only"));
  e = error_of(R"("structured_outputs": {"disable_any_whitespace": true})");
  EXPECT_EQ(e.param, "structured_outputs");
  e = error_of(R"("guided_whitespace_pattern": " ")");
  EXPECT_EQ(e.param, "guided_whitespace_pattern");
  e = error_of(R"("guided_choice": [1])");
  EXPECT_EQ(e.param, "guided_choice");
  e = error_of(R"("guided_json": "{not json")");
  EXPECT_EQ(e.param, "guided_json");
  // A forced tool call constrains the output already.
  e = error_of(R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice":
      "required", "guided_regex": "a")",
               true);
  EXPECT_EQ(e.param, "guided_regex");
  // A tool whose parameters use what the compiler refuses: 400 naming tools.
  e = error_of(R"("tools": [{"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "properties": {"x": {"type": "string", "format": "hostname"}}}}}],
      "tool_choice": "required")",
               true);
  EXPECT_EQ(e.param, "tools");
  EXPECT_THAT(e.message, HasSubstr("hostname"));
}

TEST(StructuredRequestTest, OptionsApplyToForcedToolCalls) {
  const ChatRequest r = parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
      "structured_outputs": {"disable_any_whitespace": true}})",
                                           testing::context());
  ASSERT_TRUE(r.engine_request.params.structured_outputs);
  EXPECT_TRUE(r.engine_request.params.structured_outputs->disable_any_whitespace);
  EXPECT_FALSE(Json::parse(*r.engine_request.params.structured_outputs->json).contains("maxItems"));
  // parallel_tool_calls false: one call at most.
  const ChatRequest one = parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
      "parallel_tool_calls": false})",
                                             testing::context());
  EXPECT_EQ(Json::parse(*one.engine_request.params.structured_outputs->json)["maxItems"], 1);
}

TEST(StructuredRequestTest, RequiredToolSchemaKeepsEachToolsReferences) {
  ServerContext ctx = testing::context();
  ctx.max_model_len = 1 << 20;  // the default template writes the tools into the prompt
  const ChatRequest r = parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}],
      "tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "object",
        "properties": {"p": {"$ref": "#/$defs/P"}}, "required": ["p"],
        "$defs": {"P": {"type": "integer"}}}}},
       {"type": "function", "function": {"name": "b", "parameters": {"type": "object",
        "properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {"type": "string"}}}}}],
      "tool_choice": "required"})",
                                           ctx);
  const Json schema = Json::parse(*r.engine_request.params.structured_outputs->json);
  EXPECT_EQ(schema["$defs"]["tool_0"]["properties"]["p"]["$ref"], "#/$defs/tool_0/$defs/P");
  EXPECT_EQ(schema["$defs"]["tool_1"]["properties"]["p"]["$ref"], "#/$defs/tool_1/$defs/P");
}

}  // namespace
}  // namespace pagoda::openai
