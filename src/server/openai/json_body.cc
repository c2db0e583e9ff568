#include "server/openai/json_body.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "server/openai/api_error.h"
#include "tokenizer/utf8.h"

namespace pagoda::openai {
namespace {

// nlohmann's parser keeps its own stack, but destroying, dumping and walking a value recurse:
// counting brackets first (outside strings) keeps 100k '[' from ever becoming a value.
bool check_depth(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

std::string type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

[[noreturn]] void wrong_type(const Json& v, const std::string& param, const char* expected) {
  throw bad_request(fmt::format("'{}' must be {}, got {}", param, expected, type_name(v)), param);
}

Json parse_checked(std::string_view text, const std::string& what, const std::string& param) {
  if (!utf8::is_valid(text)) throw bad_request(what + " is not valid UTF-8", param);
  if (!check_depth(text)) {
    throw bad_request(fmt::format("{} nests deeper than {} levels", what, kMaxJsonDepth), param);
  }
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; keep the position and reason.
    std::string reason = e.what();
    if (const size_t close = reason.find("] ");
        reason.rfind("[json.", 0) == 0 && close != reason.npos) {
      reason = reason.substr(close + 2);
    }
    throw bad_request(fmt::format("Malformed JSON in {}: {}", what, reason), param);
  }
}

}  // namespace

Json parse_json_body(std::string_view body) {
  Json j = parse_checked(body, "request body", "");
  if (!j.is_object()) throw bad_request("Request body must be a JSON object");
  return j;
}

Json parse_json_value(std::string_view text, const std::string& param) {
  return parse_checked(text, "'" + param + "'", param);
}

std::string field_path(const std::string& prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : fmt::format("{}.{}", prefix, key);
}

std::string field_path(const std::string& prefix, size_t index) {
  return fmt::format("{}[{}]", prefix, index);
}

const Json* find_field(const Json& object, std::string_view key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> get_bool(const Json& object, std::string_view key, const std::string& param) {
  const Json* v = find_field(object, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(*v, param, "a boolean");
  return v->get<bool>();
}

std::optional<std::string> get_string(const Json& object, std::string_view key,
                                      const std::string& param) {
  const Json* v = find_field(object, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(*v, param, "a string");
  return v->get<std::string>();
}

int64_t as_int(const Json& v, const std::string& param, int64_t lo, int64_t hi) {
  double d = 0;
  if (v.is_number_integer()) {
    // Unsigned values past int64 compare as doubles below; they are out of every range we use.
    d = v.is_number_unsigned() ? static_cast<double>(v.get<uint64_t>())
                               : static_cast<double>(v.get<int64_t>());
  } else if (v.is_number_float()) {
    d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d) wrong_type(v, param, "an integer");
  } else {
    wrong_type(v, param, "an integer");
  }
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
    throw bad_request(fmt::format("'{}' must be in [{}, {}], got {}", param, lo, hi, v.dump()),
                      param);
  }
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_unsigned()) return static_cast<int64_t>(v.get<uint64_t>());
  return static_cast<int64_t>(d);
}

std::optional<int64_t> get_int(const Json& object, std::string_view key, const std::string& param,
                               int64_t lo, int64_t hi) {
  const Json* v = find_field(object, key);
  if (!v) return std::nullopt;
  return as_int(*v, param, lo, hi);
}

void reject_unknown_keys(const Json& object, std::initializer_list<std::string_view> allowed,
                         const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      const std::string param = field_path(where, key);
      throw bad_request(fmt::format("Unknown field '{}' in '{}'", key, where), param);
    }
  }
}

}  // namespace pagoda::openai
