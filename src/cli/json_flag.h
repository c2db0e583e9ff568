#pragma once
// Flags whose value is a JSON object, as vLLM's --speculative-config and --kv-transfer-config.
#include <string_view>

#include <nlohmann/json.hpp>

namespace pagoda::cli {

/// text parsed as a JSON object; InvalidArgument "not valid JSON (...)" or "must be a JSON
/// object" otherwise (the caller prefixes the flag's name).
nlohmann::json parse_json_object(std::string_view text);

}  // namespace pagoda::cli
