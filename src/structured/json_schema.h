#pragma once
// JSON Schema -> Grammar, for the subset real-world schemas use (OpenAI strict mode, Pydantic);
// src/structured/README.md lists it. Every keyword that would constrain the output is either
// enforced exactly or refused with an error naming it: the grammar never matches a document the
// schema rejects. Where JSON Schema allows choices the grammar fixes one, as xgrammar does:
// properties come in the order the schema declares them, an object without additionalProperties
// has no other properties, strings and numbers are written in one canonical form per value.
#include <optional>
#include <string>
#include <string_view>

#include "structured/grammar.h"

namespace pagoda::structured {

/// Whitespace between JSON tokens.
struct JsonFormat {
  /// true: any run of spaces, tabs and newlines where JSON allows it (xgrammar's default);
  /// false: none but one space after ':' and ',' (Python's json.dumps).
  bool any_whitespace = true;
  /// A regex the whitespace must match instead (vLLM's whitespace_pattern), e.g. "[ ]?".
  std::optional<std::string> whitespace_pattern;
  /// What an object schema without additionalProperties allows besides its properties: nothing
  /// (false, xgrammar's strict reading) or any property (true, JSON Schema's default).
  bool unlisted_properties = false;
};

/// Compiles a JSON Schema document (text). Throws InvalidArgument "json schema: at /json/pointer:
/// ..." naming the unsupported keyword or the bad value.
[[nodiscard]] Grammar json_schema_grammar(std::string_view schema, const JsonFormat& format = {});

/// Any JSON object (response_format json_object).
[[nodiscard]] Grammar json_object_grammar(const JsonFormat& format = {});

}  // namespace pagoda::structured
