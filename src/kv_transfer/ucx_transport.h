#pragma once
// The UCX transport of prefill/decode disaggregation (UCP; the protocol in wire.h): a small
// request/response by active messages, then the consumer reads the producer's blocks with one
// ucp_get (RMA: RDMA on InfiniBand/RoCE, a single copy through shared memory or CMA on one host,
// UCX's emulation over TCP elsewhere). Each side runs one UCP worker on its own thread
// (ucx_worker.h); pulls and served connections are asynchronous, so one thread moves many
// transfers at once.
#include <memory>
#include <string>

#include "kv_transfer/transport.h"
#include "kv_transfer/ucx_worker.h"

namespace pagoda::kv_transfer {

/// Serves `store` (which must outlive it) on a UCP listener at host:port (port 0: an ephemeral
/// one). Throws InvalidArgument naming the address when it cannot listen, or `options.tls` when
/// UCX refuses it. Expired entries are freed every keep_timeout / 4 (within [1 ms, 1 s]); a
/// connection whose consumer neither finishes nor goes away is closed after the keep timeout.
[[nodiscard]] std::unique_ptr<KVServer> make_ucx_kv_server(KVExportStore& store,
                                                           const std::string& host, int port,
                                                           const UcxOptions& options);

/// A consumer's puller over UCX.
[[nodiscard]] std::unique_ptr<KVPuller> make_ucx_kv_puller(const UcxOptions& options);

}  // namespace pagoda::kv_transfer
