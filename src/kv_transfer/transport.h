#pragma once
// The byte transport of prefill/decode disaggregation, behind two interfaces: a producer serves
// pulls of its KVExportStore on its own transfer port, a consumer pulls one request's blocks
// asynchronously. TCP (Boost.Asio, tcp_transport.h) and UCX (ucx_transport.h) implement both;
// make_kv_server and make_kv_puller pick one by name.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kv_transfer/export_store.h"
#include "kv_transfer/wire.h"

namespace pagoda::kv_transfer {

/// One pull: where the producer's transfer port is, which request, and what the consumer accepts.
struct PullRequest {
  std::string host;               // the producer's transfer host (kv_transfer_params remote_host)
  int port = 0;                   // its transfer port (remote_port)
  std::string remote_request_id;  // the producer's request id (remote_request_id)
  uint64_t fingerprint = 0;       // the consumer's layout_fingerprint: both ends compare it
  int32_t block_size = 0;         // the consumer's tokens per block: the reply must match
  int64_t block_bytes = 0;        // the consumer's bytes per block: the reply must match
  int32_t max_blocks = 0;         // the most blocks accepted (remote_block_ids' count)
  std::chrono::milliseconds timeout{30000};  // the whole pull, connect to last byte
};

/// The outcome of a pull: the blocks, each checked against its checksum, or why not.
struct PullResult {
  std::shared_ptr<ExportedKV> kv;  // null on failure
  std::string error;               // empty on success
  int64_t bytes_received = 0;      // bytes read from the producer, headers included
  double seconds = 0;              // from the pull's start to its end
  [[nodiscard]] bool ok() const { return kv != nullptr; }
};

/// The consumer's side. Thread-safe; `done` runs exactly once, on the transport's thread.
class KVPuller {
 public:
  virtual ~KVPuller() = default;
  virtual void pull(const PullRequest& request, std::function<void(PullResult)> done) = 0;
};

/// The producer's side: serves pulls of `store` until destroyed, and frees the store's expired
/// entries as it goes.
class KVServer {
 public:
  virtual ~KVServer() = default;
  /// The port it listens on (the one asked for, or the ephemeral one chosen for port 0).
  [[nodiscard]] virtual int port() const = 0;
};

/// UCX settings from kv_connector_extra_config (UCX's own UCX_* variables apply beneath them).
struct UcxOptions {
  /// UCX's transport list (its TLS setting), such as "tcp", "sm,tcp" or "rc,sm,self";
  /// empty: UCX's choice among what the machine has.
  std::string tls;
};

/// The transport by name ("tcp" or "ucx"; `ucx` is used by UCX alone). The server serves
/// `store` (which must outlive it) on host:port (port 0: an ephemeral one); InvalidArgument
/// names an unknown transport or an address it cannot listen on.
[[nodiscard]] std::unique_ptr<KVServer> make_kv_server(const std::string& transport,
                                                       KVExportStore& store,
                                                       const std::string& host, int port,
                                                       const UcxOptions& ucx);
[[nodiscard]] std::unique_ptr<KVPuller> make_kv_puller(const std::string& transport,
                                                       const UcxOptions& ucx);

// ---- What every transport checks (shared so that they refuse alike) ----

/// The reply status for the store's answer to a take().
[[nodiscard]] ReplyStatus reply_status(KVExportStore::TakeError error);
/// A consumer's checks of the producer's reply header against its pull: empty when the blocks
/// may be read, else why not (the producer's refusal, another layout or block shape, more
/// blocks than announced).
[[nodiscard]] std::string check_reply(const ReplyHeader& reply, const PullRequest& request);
/// An empty ExportedKV shaped by an accepted reply: token ids, checksums and bytes sized
/// [num_blocks * block_size], [num_blocks] and [num_blocks * block_bytes].
[[nodiscard]] std::shared_ptr<ExportedKV> shape_of(const ReplyHeader& reply);
/// Empty when every block matches its checksum, else the first that does not.
[[nodiscard]] std::string check_blocks(const ExportedKV& kv);

}  // namespace pagoda::kv_transfer
