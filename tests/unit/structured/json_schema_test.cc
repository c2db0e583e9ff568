// JSON Schema -> grammar, checked against an independent validator (json_test_util): random valid
// instances must match (written compactly, in json.dumps style and with random whitespace), and
// mutated instances the validator rejects must not. To add a schema: append it to kSchemas (give
// string patterns "examples", which the generator draws from).
#include "structured/json_schema.h"

#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/status.h"
#include "json_test_util.h"
#include "structured_test_util.h"

namespace pagoda::structured {
namespace {

using testing::Json;

const char* const kSchemas[] = {
    // 0: a person, with formats, bounds and a nested optional object.
    R"({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "address": {"type": "object", "properties": {
            "street": {"type": "string"},
            "zip": {"type": "string", "pattern": "^[0-9]{5}$", "examples": ["12345", "00001"]}},
          "required": ["zip"]}},
      "required": ["name", "age"]})",
    // 1: OpenAI's strict-mode math reasoning example.
    R"({"type": "object", "properties": {
        "steps": {"type": "array", "items": {"type": "object", "properties": {
            "explanation": {"type": "string"}, "output": {"type": "string"}},
          "required": ["explanation", "output"], "additionalProperties": false}},
        "final_answer": {"type": "string"}},
      "required": ["steps", "final_answer"], "additionalProperties": false})",
    // 2: enum, const, nullable and type lists.
    R"({"type": "object", "properties": {
        "color": {"enum": ["red", "green", "blue", 7, null, {"x": [1, 2]}]},
        "kind": {"const": "fixed\"quote"},
        "maybe": {"type": ["integer", "null"]},
        "legacy": {"type": "string", "nullable": true}},
      "required": ["color", "kind", "maybe", "legacy"]})",
    // 3: a recursive tree through $defs.
    R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
      "required": ["value"]}}})",
    // 4: a discriminated oneOf (Pydantic).
    R"({"type": "object", "properties": {"pet": {"oneOf": [
        {"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}},
      "required": ["pet"],
      "$defs": {
        "Cat": {"type": "object", "properties": {"pet_type": {"const": "cat"},
                "meows": {"type": "integer"}}, "required": ["pet_type", "meows"]},
        "Dog": {"type": "object", "properties": {"pet_type": {"const": "dog"},
                "barks": {"type": "number"}}, "required": ["pet_type", "barks"]}}})",
    // 5: numbers within bounds.
    R"({"type": "array", "prefixItems": [
        {"type": "number", "minimum": -5, "maximum": 10},
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        {"type": "integer", "exclusiveMinimum": -3, "maximum": 1000000},
        {"type": "integer", "minimum": -40, "maximum": -2},
        {"type": "number"}], "items": false, "minItems": 5})",
    // 6: string lengths and formats.
    R"({"type": "object", "properties": {
        "code": {"type": "string", "minLength": 2, "maxLength": 4},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "clock": {"type": "string", "format": "time"},
        "id": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"}},
      "required": ["code", "day", "at", "clock", "id", "ip"]})",
    // 7: additional properties by schema, and a required name only they can provide.
    R"({"type": "object", "properties": {"a": {"type": "integer"}},
      "required": ["a", "b"], "additionalProperties": {"type": "boolean"}})",
    // 8: additionalProperties true beside declared names.
    R"({"type": "object", "properties": {"id": {"type": "integer"}, "idx": {"type": "string"}},
      "additionalProperties": true})",
    // 9: eight optional properties (the grammar's shared tails).
    R"({"type": "object", "properties": {
        "p1": {"type": "boolean"}, "p2": {"type": "integer"}, "p3": {"type": "string"},
        "p4": {"type": "null"}, "p5": {"type": "number"}, "p6": {"type": "boolean"},
        "p7": {"type": "integer"}, "p8": {"type": "string"}}, "required": ["p4"]})",
    // 10: allOf of one reference, Pydantic v1 style, with an enum definition.
    R"({"type": "object", "properties": {"color": {"allOf": [{"$ref": "#/definitions/Color"}],
        "description": "the color"}}, "required": ["color"],
      "definitions": {"Color": {"title": "Color", "enum": ["red", "green"], "type": "string"}}})",
    // 11: anything.
    R"({})",
    // 12: anyOf with sibling keywords (vLLM's tool_choice=required schema).
    R"({"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": [
        {"properties": {"name": {"type": "string", "enum": ["get_weather"]},
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}, "required": ["name", "parameters"]},
        {"properties": {"name": {"type": "string", "enum": ["get_time"]},
          "parameters": {"type": "object", "properties": {}}}, "required": ["name", "parameters"]}]}})",
    // 13: a pattern searched inside the string (no anchors).
    R"({"type": "string", "pattern": "ab+c", "examples": ["abc", "xxabbbcyy", "abc\"\\"]})",
    // 14: an array of arrays with bounds.
    R"({"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 1,
        "maximum": 3}, "minItems": 1, "maxItems": 2}, "minItems": 2, "maxItems": 3})",
};

std::string error_of(const std::string& schema) {
  try {
    (void)json_schema_grammar(schema);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchema, RandomInstancesMatchAndInvalidMutationsDoNot) {
  std::mt19937 rng(1234);
  for (size_t k = 0; k < std::size(kSchemas); ++k) {
    SCOPED_TRACE(::testing::Message() << "schema " << k);
    const Json schema = Json::parse(kSchemas[k]);
    const auto any_ws = compile_grammar(json_schema_grammar(kSchemas[k]), testing::byte_vocab());
    const auto compact = compile_grammar(json_schema_grammar(kSchemas[k], {false, std::nullopt}),
                                         testing::byte_vocab());
    int generated = 0, rejected = 0;
    for (int i = 0; i < 150; ++i) {
      const auto instance = testing::random_instance(schema, schema, rng);
      if (!instance) continue;
      ASSERT_TRUE(testing::validates(schema, *instance, schema)) << instance->dump();
      ++generated;
      const std::string python = testing::dump(*instance, nullptr);
      const std::string spaced = testing::dump(*instance, &rng);
      EXPECT_TRUE(testing::full_match(any_ws, python)) << python;
      EXPECT_TRUE(testing::full_match(any_ws, spaced)) << spaced;
      EXPECT_TRUE(testing::full_match(compact, python)) << python;
      if (k != 11) EXPECT_FALSE(testing::full_match(compact, python + " ")) << python;
      const Json bad = testing::mutate(*instance, rng);
      if (!testing::validates(schema, bad, schema)) {
        ++rejected;
        const std::string text = testing::dump(bad, &rng);
        EXPECT_FALSE(testing::full_match(any_ws, text)) << text;
      }
      // A corrupted text: not JSON, or JSON the validator rejects, must not match.
      std::string corrupt = spaced;
      const size_t at = rng() % corrupt.size();
      switch (rng() % 3) {
        case 0:
          corrupt.erase(at, 1);
          break;
        case 1:
          corrupt.insert(at, 1, "\"{}[],:0a\\-"[rng() % 11]);
          break;
        default:
          corrupt[at] = "\"{}[],:0a\\-"[rng() % 11];
      }
      const Json parsed = Json::parse(corrupt, nullptr, false);
      if (parsed.is_discarded() || !testing::validates(schema, parsed, schema)) {
        EXPECT_FALSE(testing::full_match(any_ws, corrupt)) << corrupt;
      }
    }
    EXPECT_GE(generated, 100);
    if (k != 11) EXPECT_GE(rejected, 10);
  }
}

TEST(JsonSchema, CanonicalFormsOnly) {
  const auto g = compile_grammar(json_schema_grammar(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a", "b"]})"),
                                 testing::byte_vocab());
  EXPECT_TRUE(testing::full_match(g, R"({"a": 1, "b": "x"})"));
  EXPECT_FALSE(testing::full_match(g, R"({"b": "x", "a": 1})"));          // declared order
  EXPECT_FALSE(testing::full_match(g, R"({"a": 1, "b": "x", "c": 2})"));  // no additional
  EXPECT_FALSE(testing::full_match(g, R"({"a": 01, "b": "x"})"));
  EXPECT_FALSE(testing::full_match(g, R"( {"a": 1, "b": "x"})"));  // nothing around the value
}

TEST(JsonSchema, AdditionalKeysNeverSpellADeclaredName) {
  const auto g = compile_grammar(json_schema_grammar(R"({"type": "object", "properties": {
      "id": {"type": "integer"}}, "additionalProperties": {"type": "string"}})"),
                                 testing::byte_vocab());
  EXPECT_TRUE(testing::full_match(g, R"({"id": 1, "idx": "a", "i": "b", "": "c"})"));
  EXPECT_FALSE(testing::full_match(g, R"({"id": 1, "id": "a"})"));
  EXPECT_FALSE(testing::full_match(g, R"({"id": "a"})"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_THAT(error_of(R"({"type": "string", "contentEncoding": "base64"})"),
              ::testing::HasSubstr("at /contentEncoding: unsupported keyword 'contentEncoding'"));
  EXPECT_THAT(error_of(R"({"type": "object", "properties": {"a": {"not": {}}}})"),
              ::testing::HasSubstr("at /properties/a/not: unsupported keyword 'not'"));
  EXPECT_THAT(error_of(R"({"type": "array", "uniqueItems": true})"),
              ::testing::HasSubstr("at /uniqueItems: 'uniqueItems' is not supported"));
  EXPECT_THAT(error_of(R"({"type": "number", "multipleOf": 0.5})"),
              ::testing::HasSubstr("multipleOf"));
  EXPECT_THAT(error_of(R"({"type": "number", "minimum": 0.5})"),
              ::testing::HasSubstr("at /minimum: non-integer bounds"));
  EXPECT_THAT(error_of(R"({"type": "string", "format": "hostname"})"),
              ::testing::HasSubstr("unsupported string format 'hostname'"));
  EXPECT_THAT(error_of(R"({"type": "string", "pattern": "(a"})"),
              ::testing::HasSubstr("at /pattern: regex: at offset 0: unterminated group"));
  EXPECT_THAT(error_of(R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})"),
              ::testing::HasSubstr("'oneOf' branches 0 and 1 may both match"));
  EXPECT_THAT(error_of(R"({"$ref": "http://example.com/s.json"})"),
              ::testing::HasSubstr("only references inside the schema"));
  EXPECT_THAT(error_of(R"({"$ref": "#/$defs/missing"})"), ::testing::HasSubstr("does not resolve"));
  EXPECT_THAT(error_of(R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})"),
              ::testing::HasSubstr("more than one schema"));
  EXPECT_THAT(error_of(R"({"type": "strng"})"), ::testing::HasSubstr("unknown type 'strng'"));
  EXPECT_THAT(error_of(R"({"type": "integer", "minimum": 5, "maximum": 1})"),
              ::testing::HasSubstr("no integer lies in [5, 1]"));
  EXPECT_THAT(error_of("{not json"), ::testing::HasSubstr("not valid JSON"));
  EXPECT_THAT(error_of("false"), ::testing::HasSubstr("matches nothing"));
  EXPECT_THAT(error_of(R"({"type": "object", "required": ["x"], "additionalProperties": false})"),
              ::testing::HasSubstr("required property 'x'"));
}

TEST(JsonSchema, WhitespacePattern) {
  JsonFormat f;
  f.whitespace_pattern = "[ ]?";
  const auto g =
      compile_grammar(json_schema_grammar(R"({"type": "array", "items": {"type": "integer"}})", f),
                      testing::byte_vocab());
  EXPECT_TRUE(testing::full_match(g, "[1, 2,3 ]"));
  EXPECT_FALSE(testing::full_match(g, "[1,\n2]"));
  EXPECT_FALSE(testing::full_match(g, "[1,  2]"));
}

TEST(JsonSchema, JsonObjectMode) {
  const auto g = compile_grammar(json_object_grammar(), testing::byte_vocab());
  EXPECT_TRUE(testing::full_match(g, R"({"a": [1, {"b": null}], "c": "\u00e9"})"));
  EXPECT_TRUE(testing::full_match(g, "{}"));
  EXPECT_FALSE(testing::full_match(g, "[1]"));
  EXPECT_FALSE(testing::full_match(g, R"({"a": 1,})"));
}

}  // namespace
}  // namespace pagoda::structured
