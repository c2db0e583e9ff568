#pragma once
// Small accessors for tokenizer.json fields that turn type and presence mistakes into
// InvalidArgument errors naming the file and the field.
#include <string>

#include <nlohmann/json.hpp>

namespace pagoda::tokenizer_json {

using Json = nlohmann::json;

/// Throws InvalidArgument "<file>: <what>".
[[noreturn]] void fail(const std::string& file, const std::string& what);

/// The member `key` of object `j` (which `where` names), or an error naming file and field.
[[nodiscard]] const Json& require(const Json& j, const char* key, const std::string& file,
                                  const std::string& where);

/// The member as a string / bool / int, or `fallback` when absent or null.
[[nodiscard]] std::string get_string(const Json& j, const char* key, const std::string& file,
                                     const std::string& where, const std::string& fallback = "");
[[nodiscard]] bool get_bool(const Json& j, const char* key, const std::string& file,
                            const std::string& where, bool fallback);
[[nodiscard]] int64_t get_int(const Json& j, const char* key, const std::string& file,
                              const std::string& where, int64_t fallback);

/// The "type" member of a component object.
[[nodiscard]] std::string component_type(const Json& j, const std::string& file,
                                         const std::string& where);

}  // namespace pagoda::tokenizer_json
