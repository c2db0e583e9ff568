// `pagoda router --backend URL...`: one OpenAI-compatible address in front of several engines
// (data parallelism), with prefix-cache-aware routing, health checks and retries
// (src/router/), until SIGINT or SIGTERM.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/signals.h"
#include "core/logging.h"
#include "core/status.h"
#include "kv/memory_size.h"
#include "router/router_server.h"

namespace pagoda::cli {
namespace {

struct RouterFlags {
  std::vector<std::string> backends;
  std::vector<std::string> prefill, decode;  // P/D mode: producers and consumers
  double prefill_timeout = 120;              // P/D mode: seconds a prefill may take
  bool bidirectional_kv = false;             // P/D mode: finished turns' KV back to the producer
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  double health_interval = 5;
  int max_retries = 2;
  int64_t balance_abs_threshold = 32;
  double balance_rel_threshold = 1.5;
  int64_t prefix_block_chars = 256;
  double shutdown_timeout = 30;
  std::string max_request_body = "16M";
};

std::chrono::milliseconds seconds_flag(double seconds, const char* flag, bool zero_ok) {
  if (!(seconds > 0 || (zero_ok && seconds == 0))) {
    throw InvalidArgument(fmt::format("{} must be {} 0", flag, zero_ok ? ">=" : ">"));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

router::RouterOptions router_options(const RouterFlags& f) {
  router::RouterOptions o;
  if (!f.prefill.empty() || !f.decode.empty()) {
    // P/D mode: the decode engines answer, the prefill engines hand their KV over.
    if (!f.backends.empty()) {
      throw InvalidArgument(
          "--backend with --prefill/--decode: give the engines of P/D mode as --prefill URL... "
          "(kv_producer) and --decode URL... (kv_consumer), or plain engines as --backend URL...");
    }
    if (f.prefill.empty()) throw InvalidArgument("--decode needs at least one --prefill URL");
    if (f.decode.empty()) throw InvalidArgument("--prefill needs at least one --decode URL");
    o.backends = f.decode;
    o.prefill_backends = f.prefill;
  } else {
    if (f.backends.empty()) {
      throw InvalidArgument(
          "give at least one --backend http://HOST:PORT (or --prefill and --decode URLs)");
    }
    o.backends = f.backends;
  }
  o.prefill_timeout = seconds_flag(f.prefill_timeout, "--prefill-timeout", false);
  if (f.bidirectional_kv && o.prefill_backends.empty()) {
    throw InvalidArgument("--bidirectional-kv needs P/D mode (--prefill URL... --decode URL...)");
  }
  o.bidirectional_kv = f.bidirectional_kv;
  o.http.host = f.host;
  o.http.port = static_cast<uint16_t>(f.port);
  o.http.num_io_threads =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 2, 4);
  o.num_client_threads = o.http.num_io_threads;
  try {
    o.http.max_request_body = static_cast<size_t>(kv::parse_memory_size(f.max_request_body));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("--max-request-body: {}", e.what()));
  }
  o.api_key = f.api_key;
  if (const char* env = std::getenv("PAGODA_API_KEY"); o.api_key.empty() && env != nullptr) {
    o.api_key = env;
  }
  o.health_interval = seconds_flag(f.health_interval, "--health-interval", false);
  if (f.max_retries < 0) throw InvalidArgument("--max-retries must be >= 0");
  o.max_retries = f.max_retries;
  if (f.balance_abs_threshold < 0) throw InvalidArgument("--balance-abs-threshold must be >= 0");
  if (!(f.balance_rel_threshold >= 1)) {
    throw InvalidArgument("--balance-rel-threshold must be >= 1");
  }
  o.policy.balance_abs_threshold = f.balance_abs_threshold;
  o.policy.balance_rel_threshold = f.balance_rel_threshold;
  if (f.prefix_block_chars < 1) throw InvalidArgument("--prefix-block-chars must be >= 1");
  o.prefix_block_chars = static_cast<size_t>(f.prefix_block_chars);
  return o;
}

int run_router(const RouterFlags& f) {
  router::RouterOptions options = router_options(f);
  const auto grace = seconds_flag(f.shutdown_timeout, "--shutdown-timeout", true);
  // Each proxied request holds two descriptors (the client's and the backend's).
  const size_t fd_limit = http::raise_open_file_limit();
  options.http.max_connections = fd_limit > 256 ? (fd_limit - 128) / 2 : fd_limit / 4;
  install_signal_handlers();
  router::RouterServer server(options);
  const uint16_t port = server.start();
  spdlog::info(
      "routing http://{}:{} to {} backend(s) ({} healthy): {}{}{}",
      f.host.find(':') != std::string::npos ? "[" + f.host + "]" : f.host, port,
      options.backends.size() + options.prefill_backends.size(), server.num_healthy_backends(),
      fmt::join(options.backends, ", "),
      options.prefill_backends.empty()
          ? ""
          : fmt::format(" (decode), prefilled by {}", fmt::join(options.prefill_backends, ", ")),
      options.api_key.empty() ? "" : " (API key required)");
  wait_for_signal();
  spdlog::info("shutting down: up to {:g} s for requests in flight", f.shutdown_timeout);
  server.shutdown(grace);
  spdlog::info("stopped");
  return 0;
}

}  // namespace

void register_router_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<RouterFlags>();
  CLI::App* cmd = app.add_subcommand(
      "router", "Balance requests over several `pagoda serve` engines (data parallelism)");
  cmd->add_option("--backend", f->backends,
                  "an engine's base URL, http://HOST:PORT (repeatable, or several after one "
                  "--backend)");
  cmd->add_option("--prefill", f->prefill,
                  "P/D mode: a prefill engine's base URL (serve --kv-transfer-config kv_producer; "
                  "repeatable)");
  cmd->add_option("--decode", f->decode,
                  "P/D mode: a decode engine's base URL (serve --kv-transfer-config kv_consumer; "
                  "repeatable)");
  cmd->add_option("--prefill-timeout", f->prefill_timeout,
                  "P/D mode: seconds a prefill may take before the decode engine prefills the "
                  "request itself (default 120)");
  cmd->add_flag("--bidirectional-kv", f->bidirectional_kv,
                "P/D mode: each finished turn's KV flows back from the decode engine to the "
                "producer, so the next turn prefills only its new tokens (every engine kv_both)");
  cmd->add_option("--host", f->host, "address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", f->port, "port to listen on (default 8000; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", f->api_key,
                  "require 'Authorization: Bearer KEY' on every route but /health and /metrics "
                  "(or env PAGODA_API_KEY); the header is forwarded to the engines");
  cmd->add_option("--health-interval", f->health_interval,
                  "seconds between GET /health probes of each backend (default 5)");
  cmd->add_option("--max-retries", f->max_retries,
                  "other backends a request may try when its backend fails before answering "
                  "(default 2)");
  cmd->add_option("--balance-abs-threshold", f->balance_abs_threshold,
                  "a prefix match is dropped for the least-loaded backend when the matching one "
                  "has more than this many requests in flight above it (default 32) ...");
  cmd->add_option("--balance-rel-threshold", f->balance_rel_threshold,
                  "... and more than this factor times its requests in flight (default 1.5)");
  cmd->add_option("--prefix-block-chars", f->prefix_block_chars,
                  "characters per prompt block of the prefix matching (default 256)");
  cmd->add_option("--shutdown-timeout", f->shutdown_timeout,
                  "seconds requests in flight may take after SIGINT/SIGTERM (default 30)");
  cmd->add_option("--max-request-body", f->max_request_body,
                  "largest request body, e.g. 16M (default); larger gets 413");
  cmd->callback([f, &exit_code] { exit_code = run_router(*f); });
}

}  // namespace pagoda::cli
