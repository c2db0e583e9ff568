#include "tokenizer/json_util.h"

#include "core/status.h"

namespace pagoda::tokenizer_json {

void fail(const std::string& file, const std::string& what) {
  throw InvalidArgument(fmt::format("{}: {}", file, what));
}

const Json& require(const Json& j, const char* key, const std::string& file,
                    const std::string& where) {
  if (!j.is_object()) fail(file, fmt::format("{} must be an object", where));
  const auto it = j.find(key);
  if (it == j.end()) fail(file, fmt::format("{} is missing field '{}'", where, key));
  return *it;
}

std::string get_string(const Json& j, const char* key, const std::string& file,
                       const std::string& where, const std::string& fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) fail(file, fmt::format("{}.{} must be a string", where, key));
  return it->get<std::string>();
}

bool get_bool(const Json& j, const char* key, const std::string& file, const std::string& where,
              bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(file, fmt::format("{}.{} must be a boolean", where, key));
  return it->get<bool>();
}

int64_t get_int(const Json& j, const char* key, const std::string& file, const std::string& where,
                int64_t fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) fail(file, fmt::format("{}.{} must be an integer", where, key));
  return it->get<int64_t>();
}

std::string component_type(const Json& j, const std::string& file, const std::string& where) {
  const Json& type = require(j, "type", file, where);
  if (!type.is_string()) fail(file, fmt::format("{}.type must be a string", where));
  return type.get<std::string>();
}

}  // namespace pagoda::tokenizer_json
