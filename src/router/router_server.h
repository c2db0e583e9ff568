#pragma once
// RouterServer: `pagoda router --backend URL...`, an OpenAI-compatible front for several engines
// (data parallelism), or `--prefill URL... --decode URL...` (prefill/decode disaggregation: each
// completion is prefilled on a producer, whose KV a decode engine pulls). It forwards each request
// to one backend chosen by the prefix policy (prefix_policy.h), streams the answer back as it
// arrives, checks the backends' /health, retries a request whose backend failed before answering,
// and serves its own /health and /metrics. Boost stays out of this header.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "router/prefix_policy.h"
#include "server/http/http_server.h"

namespace pagoda::router {

struct RouterOptions {
  http::HttpServerOptions http;       // where the router listens (host, port, io threads, ...)
  std::vector<std::string> backends;  // http://host:port of each engine (P/D mode: the decoders)
  /// P/D mode (--prefill): the producers (--kv-transfer-config kv_producer) that prefill each
  /// completion and chat request before a decode engine (`backends`) pulls its KV. Empty: no P/D.
  std::vector<std::string> prefill_backends;
  /// P/D mode: the most a prefill may take (connect to answer) before the request falls back to a
  /// prefill on the decode engine.
  std::chrono::milliseconds prefill_timeout{120000};
  /// P/D mode, bi-directional KV (--bidirectional-kv; every engine kv_both): the decode engine
  /// keeps each finished turn's KV (kv_transfer_params return_kv) and, once the client has the
  /// answer, the producer that prefilled the turn imports it, so that the conversation's next
  /// turn prefills only its new tokens.
  bool bidirectional_kv = false;
  /// Required as "Authorization: Bearer <key>" on every route but /health and /metrics; empty:
  /// none. The header is forwarded to the backends either way.
  std::string api_key;
  std::chrono::milliseconds health_interval{5000};  // between GET /health probes of a backend
  int max_retries = 2;  // further backends a request that failed before answering may try
  size_t prefix_block_chars = 256;
  PrefixPolicyOptions policy;
  int num_client_threads = 2;                       // io threads of the connections to the backends
  std::chrono::milliseconds connect_timeout{5000};  // to connect to a backend
  std::chrono::milliseconds write_timeout{30000};   // to send a request to a backend
};

/// Listens until shutdown(); handlers never block an io thread (the backend connections are
/// asynchronous, on the router's own io threads).
class RouterServer {
 public:
  /// Checks the options; throws InvalidArgument naming the bad one.
  explicit RouterServer(RouterOptions options);
  ~RouterServer();
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  /// Probes every backend once (each probe bounded by the health interval, within 1-10 s), starts
  /// the periodic checks and listens; returns the bound port. Throws Unavailable when the
  /// address cannot be bound.
  uint16_t start();
  /// Stops accepting, lets requests in flight finish for up to `grace` (then ends them, closing
  /// their backend connections), and stops the health checks. Idempotent.
  void shutdown(std::chrono::milliseconds grace);
  [[nodiscard]] uint16_t port() const;
  /// Backends that passed their last health check (and failed no request since).
  [[nodiscard]] size_t num_healthy_backends() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::router
