#include "cli/json_flag.h"

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::cli {

nlohmann::json parse_json_object(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(fmt::format("not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) throw InvalidArgument("must be a JSON object");
  return j;
}

}  // namespace pagoda::cli
