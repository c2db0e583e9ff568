#include "cli/kv_transfer_config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <string>

#include <boost/asio/ip/address.hpp>
#include <nlohmann/json.hpp>

#include "cli/json_flag.h"
#include "core/status.h"

namespace pagoda::cli {
namespace {

using nlohmann::json;

// vLLM's connectors (vllm/distributed/kv_transfer/kv_connector/factory.py): refused by name.
constexpr std::array kVllmConnectors = {
    "NixlConnector",          "P2pNcclConnector",    "LMCacheConnectorV1", "MooncakeConnector",
    "SharedStorageConnector", "OffloadingConnector", "MultiConnector",     "DecodeBenchConnector"};

std::string string_field(const json& j, const std::string& key) {
  if (!j.is_string())
    throw InvalidArgument(fmt::format("{} must be a string, got {}", key, j.dump()));
  return j.get<std::string>();
}

// Seconds as milliseconds, > 0 and at most a day.
int seconds_field(const json& j, const std::string& key) {
  if (!j.is_number()) {
    throw InvalidArgument(fmt::format("{} must be a number of seconds, got {}", key, j.dump()));
  }
  const double s = j.get<double>();
  if (!(s > 0) || s > 86400) {
    throw InvalidArgument(fmt::format("{} must be in (0, 86400] seconds, got {}", key, s));
  }
  return std::max(1, static_cast<int>(std::lround(s * 1000)));
}

void parse_extra(const json& extra, KVTransferConfig& c) {
  if (!extra.is_object()) {
    throw InvalidArgument(
        fmt::format("kv_connector_extra_config must be a JSON object, got {}", extra.dump()));
  }
  for (const auto& [key, value] : extra.items()) {
    const std::string name = "kv_connector_extra_config." + key;
    if (key == "transport") {
      c.transport = string_field(value, name);
      if (c.transport != "tcp" && c.transport != "ucx") {
        throw InvalidArgument(fmt::format("{} '{}' must be tcp or ucx", name, c.transport));
      }
    } else if (key == "host") {
      c.host = string_field(value, name);
      boost::system::error_code ec;
      (void)boost::asio::ip::make_address(c.host, ec);
      if (ec) throw InvalidArgument(fmt::format("{} '{}' is not an IP address", name, c.host));
    } else if (key == "port") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 65535) {
        throw InvalidArgument(
            fmt::format("{} must be an integer in [0, 65535] (0: an ephemeral "
                        "port), got {}",
                        name, value.dump()));
      }
      c.port = value.get<int>();
    } else if (key == "pull_timeout") {
      c.pull_timeout_ms = seconds_field(value, name);
    } else if (key == "keep_timeout") {
      c.keep_timeout_ms = seconds_field(value, name);
    } else if (key == "ucx_tls") {
      c.ucx_tls = string_field(value, name);
      // UCX's list: names, commas, and its ^ (all but) and : (device) marks.
      const bool plain = std::all_of(c.ucx_tls.begin(), c.ucx_tls.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == ',' ||
               ch == '^' || ch == ':';
      });
      if (c.ucx_tls.empty() || !plain) {
        throw InvalidArgument(fmt::format(
            "{} must be UCX's transport list, such as \"tcp\" or \"rc,sm,self\", got {}", name,
            value.dump()));
      }
    } else {
      throw InvalidArgument(fmt::format(
          "unknown key {} (pagoda's: transport, host, port, pull_timeout, keep_timeout, ucx_tls)",
          name));
    }
  }
  if (!c.ucx_tls.empty() && c.transport != "ucx") {
    throw InvalidArgument(fmt::format(
        "kv_connector_extra_config.ucx_tls needs transport ucx (transport is {})", c.transport));
  }
}

}  // namespace

KVTransferConfig parse_kv_transfer_config(std::string_view text) {
  json j = parse_json_object(text);
  KVTransferConfig c;
  bool has_connector = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "kv_connector") {
      c.kv_connector = string_field(value, key);
      has_connector = true;
      if (std::find(kVllmConnectors.begin(), kVllmConnectors.end(), c.kv_connector) !=
          kVllmConnectors.end()) {
        throw InvalidArgument(fmt::format(
            "kv_connector '{}' is vLLM's; pagoda's engines talk through PagodaConnector",
            c.kv_connector));
      }
      if (c.kv_connector != "PagodaConnector") {
        throw InvalidArgument(
            fmt::format("kv_connector '{}' must be PagodaConnector", c.kv_connector));
      }
    } else if (key == "kv_role") {
      c.kv_role = string_field(value, key);
      if (c.kv_role != "kv_producer" && c.kv_role != "kv_consumer" && c.kv_role != "kv_both") {
        throw InvalidArgument(
            fmt::format("kv_role '{}' must be kv_producer, kv_consumer or kv_both", c.kv_role));
      }
    } else if (key == "engine_id") {
      c.engine_id = string_field(value, key);
      if (c.engine_id.empty()) throw InvalidArgument("engine_id must not be empty");
    } else if (key == "kv_connector_extra_config") {
      parse_extra(value, c);
    } else {
      throw InvalidArgument(fmt::format(
          "unknown key {} (known: kv_connector, kv_role, engine_id, kv_connector_extra_config)",
          key));
    }
  }
  if (!has_connector) throw InvalidArgument("kv_connector is required (PagodaConnector)");
  if (c.kv_role.empty()) {
    throw InvalidArgument("kv_role is required (kv_producer, kv_consumer or kv_both)");
  }
  return c;
}

}  // namespace pagoda::cli
