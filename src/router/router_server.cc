// The router's routes and lifecycle: an HttpServer in front, the backend connections and health
// probes on an io_context of the router's own.
#include "router/router_server.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "core/status.h"
#include "router/prompt_text.h"
#include "router/router_impl.h"

namespace pagoda::router {
namespace {

using Json = nlohmann::json;

/// OpenAI's error body: {"error": {"message", "type", "param", "code"}}.
Json error_json(int status, std::string_view message) {
  const char* type = status == 401   ? "AuthenticationError"
                     : status == 404 ? "NotFoundError"
                     : status < 500  ? "BadRequestError"
                                     : "InternalServerError";
  return {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}}}};
}

/// Compares in time independent of where the strings differ (an API key; its length is no
/// secret).
bool constant_time_equal(std::string_view given, std::string_view expected) {
  if (given.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ expected[i]);
  }
  return diff == 0;
}

bool authorized(const http::HttpRequest& request, const std::string& api_key) {
  if (api_key.empty()) return true;
  auto header = request.header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (!header || !header->starts_with(kBearer)) return false;
  return constant_time_equal(header->substr(kBearer.size()), api_key);
}

/// The transport's options: OpenAI error bodies, streams the transport ends itself ending as a
/// failed OpenAI stream does, and the API key checked before routing on all but /health and
/// /metrics (CORS preflights carry no credentials and pass).
http::HttpServerOptions transport_options(http::HttpServerOptions options,
                                          const std::string& api_key) {
  options.error_body = error_response;
  options.stream_error_tail = [](int status, std::string_view message) {
    return sse_error_tail(status, message);
  };
  options.guard = [api_key](const http::HttpRequest& r) -> std::optional<http::HttpResponse> {
    if (r.method == "OPTIONS" || r.path == "/health" || r.path == "/metrics" ||
        authorized(r, api_key)) {
      return std::nullopt;
    }
    return error_response(401, "Unauthorized: a valid 'Authorization: Bearer <key>' is required");
  };
  return options;
}

}  // namespace

http::HttpResponse error_response(int status, std::string_view message) {
  return {status, "application/json", error_json(status, message).dump(), {}};
}

std::string sse_error_tail(int status, std::string_view message) {
  return "data: " + error_json(status, message).dump() + "\n\ndata: [DONE]\n\n";
}

RouterServer::Impl::Impl(RouterOptions opts)
    : options(std::move(opts)),
      pool(options.backends, options.policy),
      prefill_pool(options.prefill_backends.empty()
                       ? nullptr
                       : std::make_unique<BackendPool>(options.prefill_backends, options.policy)),
      metrics([this] {
        std::vector<std::string> urls;
        for (size_t b = 0; b < pool.size(); ++b) urls.push_back(pool.url(b));
        for (size_t b = 0; prefill_pool && b < prefill_pool->size(); ++b)
          urls.push_back(prefill_pool->url(b));
        return urls;
      }()) {
  if (options.prefill_timeout <= std::chrono::milliseconds(0)) {
    throw InvalidArgument("--prefill-timeout must be > 0");
  }
  if (options.prefix_block_chars < 1) throw InvalidArgument("--prefix-block-chars must be >= 1");
  if (options.max_retries < 0) throw InvalidArgument("--max-retries must be >= 0");
  if (options.health_interval <= std::chrono::milliseconds(0)) {
    throw InvalidArgument("--health-interval must be > 0");
  }
  if (options.num_client_threads < 1) throw InvalidArgument("the router needs a client thread");
  http = std::make_unique<http::HttpServer>(transport_options(options.http, options.api_key));

  auto forwarded = [this](bool prefix_aware) {
    return [this, prefix_aware](http::HttpRequest request,
                                std::shared_ptr<http::Responder> responder) {
      std::vector<uint64_t> hashes;
      if (prefix_aware) {
        hashes = prefix_block_hashes(routing_text(request.body), options.prefix_block_chars);
      }
      forward(std::move(request), std::move(responder), std::move(hashes));
    };
  };
  for (const char* path :
       {"/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/tokenize", "/detokenize"}) {
    http->route("POST", path, forwarded(true));
  }
  http->route("GET", "/v1/models", forwarded(false));
  http->route("GET", "/health", [this](http::HttpRequest, std::shared_ptr<http::Responder> r) {
    if (stopping.load()) {
      r->send(error_response(503, "the router is shutting down"));
    } else if (pool.any_healthy()) {  // P/D mode: the decode engines answer even alone
      r->send({200, "text/plain", "", {}});
    } else {
      r->send(error_response(503, "no backend is healthy"));
    }
  });
  http->route("GET", "/metrics", [this](http::HttpRequest, std::shared_ptr<http::Responder> r) {
    r->send({200, "text/plain; version=0.0.4; charset=utf-8", metrics.render(snapshot()), {}});
  });
}

PoolSnapshot RouterServer::Impl::snapshot() const {
  PoolSnapshot s = pool.snapshot();
  if (prefill_pool) {
    const PoolSnapshot p = prefill_pool->snapshot();
    s.healthy.insert(s.healthy.end(), p.healthy.begin(), p.healthy.end());
    s.in_flight.insert(s.in_flight.end(), p.in_flight.begin(), p.in_flight.end());
  }
  return s;
}

RouterServer::RouterServer(RouterOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

RouterServer::~RouterServer() { shutdown(std::chrono::milliseconds(0)); }

uint16_t RouterServer::start() {
  Impl& r = *impl_;
  PAGODA_CHECK(!r.started, "the router was started twice");
  r.started = true;
  r.work.emplace(net::make_work_guard(r.ioc));
  for (int i = 0; i < r.options.num_client_threads; ++i) {
    r.threads.emplace_back([&r] { r.ioc.run(); });
  }
  r.start_health_checks();
  const uint16_t port = r.http->start();
  for (const BackendPool* p : {&r.pool, r.prefill_pool.get()}) {
    for (size_t b = 0; p != nullptr && b < p->size(); ++b) {
      if (!p->snapshot().healthy[b]) {
        spdlog::warn("router: backend {} is not healthy yet; it gets no requests until it is",
                     p->url(b));
      }
    }
  }
  return port;
}

void RouterServer::shutdown(std::chrono::milliseconds grace) {
  Impl& r = *impl_;
  if (r.stopped) return;
  r.stopped = true;
  r.stopping = true;
  // The transport first: requests in flight finish or are ended (their disconnect callbacks
  // close the backend connections) while the client threads still run.
  r.http->shutdown(grace);
  r.work.reset();
  r.ioc.stop();  // the health probes (and their timers) end with it
  for (std::thread& t : r.threads) t.join();
  r.threads.clear();
}

uint16_t RouterServer::port() const { return impl_->http->port(); }

size_t RouterServer::num_healthy_backends() const {
  const PoolSnapshot s = impl_->snapshot();
  return static_cast<size_t>(std::count(s.healthy.begin(), s.healthy.end(), true));
}

}  // namespace pagoda::router
