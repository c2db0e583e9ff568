#pragma once
// --kv-transfer-config: vLLM's JSON object (keys of vllm/config/kv_transfer.py) into a
// KVTransferConfig.
#include <string_view>

#include "pagoda/engine_args.h"

namespace pagoda::cli {

/// Parses and checks the flag's JSON: `kv_connector` "PagodaConnector" (vLLM's connectors, such
/// as NixlConnector, are refused by name), `kv_role` kv_producer | kv_consumer | kv_both (both
/// required), `engine_id` (a string), and `kv_connector_extra_config` with pagoda's transport
/// settings: `transport` "tcp" or "ucx", `host` (an IP address), `port` (0..65535),
/// `pull_timeout` and `keep_timeout` (seconds, > 0), `ucx_tls` (UCX's transport list; transport
/// ucx only). Any other key, or a value of the wrong type or range, throws
/// InvalidArgument naming the key.
[[nodiscard]] KVTransferConfig parse_kv_transfer_config(std::string_view json);

}  // namespace pagoda::cli
