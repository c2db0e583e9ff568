#pragma once
// The TCP transport of prefill/decode disaggregation (Boost.Asio; the protocol in wire.h). Each
// side runs one io_context on its own thread; pulls and served connections are asynchronous, so
// one thread moves many transfers at once.
#include <memory>
#include <string>

#include "kv_transfer/transport.h"

namespace pagoda::kv_transfer {

/// Serves `store` (which must outlive it) on host:port (port 0: an ephemeral one). Throws
/// InvalidArgument naming the address when it cannot listen. Expired entries are freed every
/// keep_timeout / 4 (at most every second, at least every millisecond).
[[nodiscard]] std::unique_ptr<KVServer> make_tcp_kv_server(KVExportStore& store,
                                                           const std::string& host, int port);

/// A consumer's puller over TCP.
[[nodiscard]] std::unique_ptr<KVPuller> make_tcp_kv_puller();

}  // namespace pagoda::kv_transfer
