#pragma once
// The constraints of the structured-output engine tests (CPU: structured_engine_test.cc, GPU:
// engine_gpu_test.cc) and a checker of each one's text. To add a case: append it to
// constraint_cases().
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "../structured/json_test_util.h"
#include "sampling/sampling_params.h"

namespace pagoda::engine_test {

using structured::testing::Json;

struct ConstraintCase {
  const char* name;
  StructuredOutputsParams params;
  std::function<bool(const std::string&)> valid;
};

inline StructuredOutputsParams json_schema(const char* schema) {
  StructuredOutputsParams so;
  so.json = schema;
  return so;
}

inline bool validates(const char* schema, const std::string& text) {
  const Json doc = Json::parse(text, nullptr, false);
  const Json s = Json::parse(schema);
  return !doc.is_discarded() && structured::testing::validates(s, doc, s);
}

constexpr const char* kPerson = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "pet": {"enum": ["cat", "dog", null]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2}},
  "required": ["name", "age", "pet"], "additionalProperties": false})";

constexpr const char* kNumbers = R"({"type": "array", "items": {"type": "number", "minimum": -10,
    "maximum": 10}, "minItems": 1, "maxItems": 4})";

inline std::vector<ConstraintCase> constraint_cases() {
  std::vector<ConstraintCase> out;
  out.push_back(
      {"schema", json_schema(kPerson), [](const std::string& t) { return validates(kPerson, t); }});
  StructuredOutputsParams compact = json_schema(kNumbers);
  compact.disable_any_whitespace = true;
  out.push_back({"compact", compact, [](const std::string& t) {
                   return validates(kNumbers, t) && t.find_first_of("\n\t") == std::string::npos;
                 }});
  StructuredOutputsParams regex;
  regex.regex = "[a-z]{2,6}@(example|test)\\.(com|org)";
  out.push_back({"regex", regex, [](const std::string& t) {
                   return std::regex_match(t, std::regex("[a-z]{2,6}@(example|test)\\.(com|org)"));
                 }});
  StructuredOutputsParams choice;
  choice.choice = std::vector<std::string>{"yes", "no", "maybe not"};
  out.push_back({"choice", choice,
                 [](const std::string& t) { return t == "yes" || t == "no" || t == "maybe not"; }});
  StructuredOutputsParams grammar;
  grammar.grammar = R"g(root ::= expr
expr ::= num (("+" | "*") num){0,3}
num ::= [1-9] [0-9]? | "(" expr ")")g";
  out.push_back({"grammar", grammar, [](const std::string& t) {
                   return std::regex_match(t, std::regex(R"([0-9()+*]+)"));
                 }});
  StructuredOutputsParams object;
  object.json_object = true;
  out.push_back({"json_object", object, [](const std::string& t) {
                   const Json doc = Json::parse(t, nullptr, false);
                   return !doc.is_discarded() && doc.is_object();
                 }});
  return out;
}

}  // namespace pagoda::engine_test
