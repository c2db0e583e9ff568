#pragma once
// Typed access to config.json fields whose errors name the file and the field: the generic parser
// (config.cc) and the family files of model/arch/ (their own fields) read through it.
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace pagoda {

/// Typed field access whose errors name the file and the field.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& j, const std::string& source) : j_(j), source_(source) {}

  [[nodiscard]] bool has(const char* key) const {
    return j_.contains(key) && !j_.at(key).is_null();
  }

  [[nodiscard]] int64_t required_int(const char* key, int64_t min_value = 1) const {
    if (!has(key)) fail(key, "is missing");
    return checked_int(key, min_value);
  }
  [[nodiscard]] int64_t optional_int(const char* key, int64_t fallback,
                                     int64_t min_value = 0) const {
    return has(key) ? checked_int(key, min_value) : fallback;
  }
  [[nodiscard]] double optional_number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number()) fail(key, "must be a number");
    return v.get<double>();
  }
  [[nodiscard]] bool optional_bool(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_boolean()) fail(key, "must be true or false");
    return v.get<bool>();
  }
  [[nodiscard]] std::string optional_string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_string()) fail(key, "must be a string");
    return v.get<std::string>();
  }
  /// A token id given as a number or a list of numbers (eos_token_id).
  [[nodiscard]] std::vector<int32_t> id_list(const char* key) const {
    std::vector<int32_t> ids;
    if (!has(key)) return ids;
    const nlohmann::json& v = j_.at(key);
    auto push = [&](const nlohmann::json& x) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX) {
        fail(key, "must be a non-negative token id or a list of them");
      }
      ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    };
    if (v.is_array()) {
      for (const nlohmann::json& x : v) push(x);
    } else {
      push(v);
    }
    return ids;
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InvalidArgument(fmt::format("{}: field '{}' {}", source_, key, what));
  }

 private:
  [[nodiscard]] int64_t checked_int(const char* key, int64_t min_value) const {
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number_integer()) fail(key, "must be an integer");
    const int64_t x = v.get<int64_t>();
    if (x < min_value) fail(key, fmt::format("must be >= {}, got {}", min_value, x));
    return x;
  }

  const nlohmann::json& j_;
  std::string source_;
};

}  // namespace pagoda
