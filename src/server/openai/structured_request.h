#pragma once
// Structured outputs in request bodies, as vLLM's OpenAI server reads them: `structured_outputs`
// ({json, regex, choice, grammar, json_object, structural_tag, disable_any_whitespace,
// disable_additional_properties, whitespace_pattern, disable_fallback}), the older `guided_json`,
// `guided_regex`, `guided_choice`, `guided_grammar` (with `guided_whitespace_pattern` and
// `guided_decoding_backend`), and `response_format` ({"type": "json_object"}, {"type":
// "json_schema", "json_schema": {"name", "schema", "strict", "description"}}, vLLM's {"type":
// "structural_tag", "structures", "triggers"}); and tool_choice "required" / a named function
// turned into the JSON Schema of the calls (vLLM's).
#include <optional>
#include <string>

#include "sampling/sampling_params.h"
#include "server/openai/json_body.h"

namespace pagoda::openai {

/// The one constraint of a body and the field it came from.
struct StructuredField {
  StructuredOutputsParams params;
  std::string param;  // "structured_outputs", "guided_json", "response_format", ...
};

/// Reads the structured-output fields of body: nullopt when none is set. A structured_outputs with
/// options only (disable_any_whitespace, whitespace_pattern, disable_additional_properties)
/// applies them to the constraint another field sets; alone (or with tool_choice, which the
/// caller applies them to) it comes back with no constraint set (null, false and empty
/// values count as unset: some clients send every field). A 400 naming the field for a wrong
/// type, an unknown key, more than one constraint, or a constraint that does not compile (with
/// the position in the schema, grammar or regex).
[[nodiscard]] std::optional<StructuredField> read_structured_outputs(const Json& body);

/// The JSON Schema the output of a forced tool call follows: for "required", an array of one or
/// more {"name": <a tool's name>, "parameters": <its parameters>} (vLLM's form); for a named
/// function, that function's parameters. tools: the request's validated tools.
[[nodiscard]] Json forced_tool_schema(const Json& tools, bool required, const std::string& name);

/// Adds the options of an options-only structured_outputs to params.
void apply_options(const StructuredOutputsParams& options, StructuredOutputsParams& params);

/// Checks that params compiles into a grammar (tokenizer-independent: syntax, schema keywords,
/// left recursion); a 400 naming `param` otherwise.
void check_structured_outputs(const StructuredOutputsParams& params, const std::string& param);

}  // namespace pagoda::openai
