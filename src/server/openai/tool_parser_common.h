#pragma once
// Pieces the tool parsers share: reading one call object, the arguments' JSON text, the bounds of
// a JSON value inside free text, and partly written call markers.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "server/openai/json_body.h"
#include "server/openai/tool_parser.h"

namespace pagoda::openai {

/// Which key a format keeps the arguments under (Llama 3.1 writes "parameters").
enum class ArgumentsKey { kArguments, kArgumentsOrParameters };

/// A call object {"name": "...", "arguments": {...}} -> ToolCall with a fresh id, or nullopt when
/// the object has no string "name". Missing arguments are "{}"; a string is taken as arguments
/// already written as JSON text (OpenAI's own form), anything else is dumped.
[[nodiscard]] std::optional<ToolCall> tool_call_from_json(const Json& call, ArgumentsKey key,
                                                          std::string id);

/// Parses one JSON value from `text` (surrounding whitespace allowed), nullopt when it is not
/// valid JSON. Never throws.
[[nodiscard]] std::optional<Json> parse_json_quietly(std::string_view text);

/// Python's json.dumps(value, ensure_ascii=False): ", " and ": " separators, keys in their
/// order. vLLM writes arguments this way, so clients see the same strings from both servers.
[[nodiscard]] std::string python_json_dumps(const Json& value);

/// The end (one past the closing bracket) of the JSON object or array that starts at
/// text[begin], found by bracket depth outside strings; npos when it does not close. Validity is
/// left to the JSON parser.
[[nodiscard]] size_t json_value_end(std::string_view text, size_t begin);

/// The length of the longest suffix of `text` that is a proper prefix of `marker`: that much of
/// a stream's tail may still grow into the marker.
[[nodiscard]] size_t partial_marker_length(std::string_view text, std::string_view marker);

/// Streaming hold-back for formats whose calls start at a marker anywhere in the text: the text
/// before the marker's first occurrence, or before a partial marker at the end.
[[nodiscard]] size_t content_before_marker(std::string_view text, std::string_view marker);

/// vLLM's ids: "chatcmpl-tool-" and 32 hex digits.
[[nodiscard]] std::string make_tool_call_id();

/// The text after leading whitespace.
[[nodiscard]] std::string_view skip_space(std::string_view text);

}  // namespace pagoda::openai
