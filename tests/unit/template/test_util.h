#pragma once
// Helpers shared by the template tests: reading shared assets and the fixed clock the expected
// renders were produced with (strftime_now formats 2024-07-26T00:00:00 local time).
#include <chrono>
#include <ctime>
#include <string>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "template/evaluator.h"

namespace pagoda::tmpl::testing {

inline std::string read_file(const std::string& path) { return read_text_file(path); }

inline nlohmann::ordered_json read_json(const std::string& path) {
  return nlohmann::ordered_json::parse(read_file(path));
}

inline std::chrono::system_clock::time_point fixed_now() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_isdst = -1;
  return std::chrono::system_clock::from_time_t(std::mktime(&tm));
}

inline RenderOptions fixed_clock_options() {
  RenderOptions options;
  options.now = fixed_now();
  return options;
}

inline const std::string kTemplatesDir =
    std::string(PAGODA_SOURCE_DIR) + "/tests/data/chat_templates/templates/";
inline const std::string kExpectedDir =
    std::string(PAGODA_SOURCE_DIR) + "/tests/data/chat_templates/expected/";
inline const std::string kDataDir = std::string(PAGODA_SOURCE_DIR) + "/tests/unit/template/data/";

}  // namespace pagoda::tmpl::testing
