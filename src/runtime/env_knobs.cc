#include "runtime/env_knobs.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "core/status.h"

namespace pagoda {

bool env_flag(const char* name, bool fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  return std::string_view(value) != "0";
}

int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  if (*end != '\0' || parsed < lo || parsed > hi) {
    throw InvalidArgument(fmt::format("{}={} must be an integer in [{}, {}]", name, value, lo, hi));
  }
  return parsed;
}

}  // namespace pagoda
