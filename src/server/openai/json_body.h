#pragma once
// Reading request bodies defensively: the body must be valid UTF-8, nest at most kMaxJsonDepth
// levels and be a JSON object; fields are read with typed getters that throw a 400 naming the
// field. Objects keep their key order (ordered_json) because chat templates see it (tools|tojson).
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace pagoda::openai {

using Json = nlohmann::ordered_json;

/// Deepest nesting of arrays/objects a request body may have (the deepest legitimate one, tool
/// parameter schemas, stays well under it).
inline constexpr int kMaxJsonDepth = 64;

/// Parses a request body into a JSON object; throws bad_request for invalid UTF-8, nesting past
/// kMaxJsonDepth, malformed JSON (including numbers out of double range) or a non-object.
[[nodiscard]] Json parse_json_body(std::string_view body);

/// Parses a JSON document embedded in a request (tool call arguments) with the same UTF-8 and depth
/// checks; a 400 naming `param` when it is malformed.
[[nodiscard]] Json parse_json_value(std::string_view text, const std::string& param);

/// "a.b" / "a[3]" style names for nested fields in error params.
[[nodiscard]] std::string field_path(const std::string& prefix, std::string_view key);
[[nodiscard]] std::string field_path(const std::string& prefix, size_t index);

/// The value of key, or nullptr when it is absent or JSON null (OpenAI clients send null for
/// "not set").
[[nodiscard]] const Json* find_field(const Json& object, std::string_view key);

/// Typed getters: nullopt when absent or null, bad_request naming `param` for a wrong type.
[[nodiscard]] std::optional<bool> get_bool(const Json& object, std::string_view key,
                                           const std::string& param);
[[nodiscard]] std::optional<std::string> get_string(const Json& object, std::string_view key,
                                                    const std::string& param);
/// Integers (3.0 counts, as pydantic accepts it) within [lo, hi].
[[nodiscard]] std::optional<int64_t> get_int(const Json& object, std::string_view key,
                                             const std::string& param, int64_t lo, int64_t hi);
[[nodiscard]] int64_t as_int(const Json& value, const std::string& param, int64_t lo, int64_t hi);

/// Throws bad_request naming the first key of object (an object at `where`) not in allowed.
void reject_unknown_keys(const Json& object, std::initializer_list<std::string_view> allowed,
                         const std::string& where);

}  // namespace pagoda::openai
