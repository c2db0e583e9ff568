// Forwarding one request: a C++20 coroutine on a strand of the router's io_context. It takes a
// backend from the pool, connects, writes the request and reads the answer's header; an answer
// with a Content-Length is read whole and sent, any other (chunked: server-sent events) is
// forwarded chunk by chunk as the backend's bytes arrive. A failure before any response byte
// (resolve, connect, write, or a close with no status line) marks the backend unhealthy and tries
// another, up to max_retries more; a failure after that ends the answer (a 502, or an error event
// and [DONE] on an event stream). A client that goes away closes the backend connection, which
// the engine takes as an abort. In P/D mode (--prefill) a completion or chat request is first
// prefilled on a producer (prefill() below), and the decode engine gets the hand-off.
#include <utility>  // before Asio 1.18, whose awaitable.hpp uses std::exchange unincluded

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "router/kv_return.h"
#include "router/router_impl.h"

namespace pagoda::router {
namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using Strand = net::strand<net::io_context::executor_type>;

// Not boost::none: Beast 1.74 compares a Content-Length against the optional limit with `>`, and
// every length is greater than an empty optional.
constexpr uint64_t kNoBodyLimit = std::numeric_limits<uint64_t>::max();
constexpr size_t kReadChunk = 16 * 1024;
// Request headers passed on to the backend (besides Host, set to the backend's).
constexpr const char* kForwardedHeaders[] = {"authorization", "content-type", "accept",
                                             "x-request-id"};

/// One request being forwarded. Its strand serialises the coroutine and the client's disconnect.
struct Call {
  Call(RouterServer::Impl& r, http::HttpRequest req, std::shared_ptr<http::Responder> resp,
       std::vector<uint64_t> h)
      : router(r),
        request(std::move(req)),
        responder(std::move(resp)),
        hashes(std::move(h)),
        strand(net::make_strand(r.ioc)) {}

  RouterServer::Impl& router;
  http::HttpRequest request;
  std::shared_ptr<http::Responder> responder;
  std::vector<uint64_t> hashes;
  Strand strand;
  std::optional<beast::tcp_stream> backend;  // this attempt's connection (on the strand)
  bool cancelled = false;                    // the client went away (on the strand)
  // Bi-directional KV (--bidirectional-kv): the decode engine was asked for the finished turn's
  // KV; the scanner finds its hand-off in the answer, for the producer that prefilled (if any).
  bool kv_return = false;
  KVReturnScanner kv_scanner;
  std::optional<size_t> producer;
  std::string cache_salt;  // the client's, for the import's hashes
};

/// How one attempt ended; `error` says why when it failed. `counted`: the metrics have it.
struct Attempt {
  Outcome outcome = Outcome::kSuccess;
  std::string error;
  bool counted = false;
};

/// Counts how a request ended on backend `b`, before its last bytes go to the client (who may
/// read /metrics next).
Attempt count_end(Call& call, size_t b, Outcome outcome, std::string error = "") {
  call.router.metrics.count_request(b, outcome);
  call.router.metrics.observe_duration(
      std::chrono::duration<double>(Clock::now() - call.request.arrival).count());
  return {outcome, std::move(error), true};
}

bhttp::request<bhttp::string_body> backend_request(const Call& call,
                                                   const client::Endpoint& endpoint,
                                                   const std::string& body,
                                                   const std::string* target = nullptr) {
  bhttp::request<bhttp::string_body> req;
  const bhttp::verb verb = bhttp::string_to_verb(call.request.method);
  if (verb == bhttp::verb::unknown) {
    req.method_string(call.request.method);
  } else {
    req.method(verb);
  }
  req.target(endpoint.base_path + (target != nullptr ? *target : call.request.target));
  req.version(11);
  req.set(bhttp::field::host, endpoint.host + ":" + endpoint.port);
  req.set(bhttp::field::user_agent, "pagoda-router");
  for (const char* name : kForwardedHeaders) {
    if (auto value = call.request.header(name)) req.set(name, std::string(*value));
  }
  // One connection per request: closing it is how a client's departure reaches the engine.
  req.keep_alive(false);
  req.body() = body;
  req.prepare_payload();
  return req;
}

/// One attempt on backend `b`. Answers the client unless it returns kConnectFailed (nothing
/// was answered; the caller may retry) or kCancelled (the client is gone).
net::awaitable<Attempt> attempt(Call& call, size_t b) {
  RouterServer::Impl& router = call.router;
  const client::Endpoint& endpoint = router.pool.endpoint(b);
  const std::string& url = router.pool.url(b);
  error_code ec;
  auto on_error = net::redirect_error(net::use_awaitable, ec);

  tcp::resolver resolver(call.strand);
  const auto addresses = co_await resolver.async_resolve(endpoint.host, endpoint.port, on_error);
  if (call.cancelled) co_return Attempt{Outcome::kCancelled, ""};
  if (ec) co_return Attempt{Outcome::kConnectFailed, "cannot resolve its host: " + ec.message()};
  call.backend.emplace(call.strand);
  beast::tcp_stream& stream = *call.backend;
  stream.expires_after(router.options.connect_timeout);
  co_await stream.async_connect(addresses, on_error);
  if (call.cancelled) co_return Attempt{Outcome::kCancelled, ""};
  if (ec) co_return Attempt{Outcome::kConnectFailed, "cannot connect: " + ec.message()};

  auto req = backend_request(call, endpoint, call.request.body);
  stream.expires_after(router.options.write_timeout);
  co_await bhttp::async_write(stream, req, on_error);
  if (call.cancelled) co_return Attempt{Outcome::kCancelled, ""};
  if (ec) co_return Attempt{Outcome::kConnectFailed, "sending the request failed: " + ec.message()};

  // An engine answers a whole (non-streamed) completion only when it is generated: no timeout.
  stream.expires_never();
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(kNoBodyLimit);
  co_await bhttp::async_read_header(stream, buffer, parser, on_error);
  if (call.cancelled) co_return Attempt{Outcome::kCancelled, ""};
  if (ec) {
    if (!parser.got_some()) {
      co_return Attempt{Outcome::kConnectFailed,
                        "the connection closed before any response byte: " + ec.message()};
    }
    const std::string message =
        fmt::format("backend {} sent a malformed response header: {}", url, ec.message());
    Attempt result = count_end(call, b, Outcome::kBroken, message);
    call.responder->send(error_response(502, message));
    co_return result;
  }
  const int status = static_cast<int>(parser.get().result_int());
  const std::string content_type(parser.get()[bhttp::field::content_type]);
  const Outcome answered = status < 400 ? Outcome::kSuccess : Outcome::kErrorStatus;
  const bool whole = parser.is_done() || parser.content_length().has_value();

  std::string chunk(kReadChunk, '\0');
  std::string body;
  if (!whole) call.responder->start_stream(status, content_type);
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    co_await bhttp::async_read_some(stream, buffer, parser, on_error);
    if (ec == bhttp::error::need_buffer) ec = {};
    if (call.cancelled) co_return Attempt{Outcome::kCancelled, ""};
    const size_t n = chunk.size() - parser.get().body().size;
    if (ec) {
      const std::string message = fmt::format(
          "backend {} closed the connection in the middle of its answer: {}", url, ec.message());
      Attempt result = count_end(call, b, Outcome::kBroken, message);
      if (whole) {
        call.responder->send(error_response(502, message));
      } else {
        if (n > 0) call.responder->write(chunk.substr(0, n));
        if (content_type.starts_with("text/event-stream")) {
          call.responder->write(sse_error_tail(502, message));
        }
        call.responder->end();
      }
      co_return result;
    }
    if (n == 0) continue;
    if (whole) {
      body.append(chunk.data(), n);
    } else {
      if (call.kv_return) call.kv_scanner.feed_stream(std::string_view(chunk.data(), n));
      call.responder->write(chunk.substr(0, n));
    }
  }
  if (call.kv_return && whole) call.kv_scanner.feed_body(body);
  Attempt result = count_end(call, b, answered);
  if (whole) {
    call.responder->send({status, content_type, std::move(body), {}});
  } else {
    call.responder->end();
  }
  co_return result;
}

// ---- P/D mode: the prefill half ----------------------------------------------------------

/// A producer's whole answer to a prefill, or why there is none.
struct PrefillAnswer {
  bool connect_failed = false;  // nothing was answered: another producer may be tried
  int status = 0;               // the HTTP status, 0 when the exchange failed
  std::string body;
  std::string error;
};

// A producer's answer is one small JSON object; anything larger is not one.
constexpr uint64_t kMaxPrefillAnswer = 16 << 20;

/// One prefill exchange with producer `b`, bounded as a whole by --prefill-timeout.
net::awaitable<PrefillAnswer> prefill_once(Call& call, size_t b, const std::string& body) {
  RouterServer::Impl& router = call.router;
  const client::Endpoint& endpoint = router.prefill_pool->endpoint(b);
  error_code ec;
  auto on_error = net::redirect_error(net::use_awaitable, ec);
  tcp::resolver resolver(call.strand);
  const auto addresses = co_await resolver.async_resolve(endpoint.host, endpoint.port, on_error);
  if (ec) co_return PrefillAnswer{true, 0, "", "cannot resolve its host: " + ec.message()};
  call.backend.emplace(call.strand);
  beast::tcp_stream& stream = *call.backend;
  stream.expires_after(router.options.prefill_timeout);
  co_await stream.async_connect(addresses, on_error);
  if (ec) co_return PrefillAnswer{true, 0, "", "cannot connect: " + ec.message()};
  auto req = backend_request(call, endpoint, body);
  co_await bhttp::async_write(stream, req, on_error);
  if (ec) co_return PrefillAnswer{true, 0, "", "sending the prefill failed: " + ec.message()};
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(kMaxPrefillAnswer);
  co_await bhttp::async_read(stream, buffer, parser, on_error);
  if (ec) {
    // Nothing read and no timeout: the producer is down (try another); a timeout: it is busy.
    co_return PrefillAnswer{!parser.got_some() && ec != beast::error::timeout, 0, "",
                            (ec == beast::error::timeout ? "no answer within --prefill-timeout: "
                                                         : "reading the answer failed: ") +
                                ec.message()};
  }
  co_return PrefillAnswer{false, static_cast<int>(parser.get().result_int()),
                          std::move(parser.get().body()), ""};
}

/// P/D mode: prefills a completion or chat request on a producer and returns the body for the
/// decode engine: the client's with the producer's kv_transfer_params (the consumer pulls the
/// prompt's KV with them). The producer gets the same body with max_tokens 1, stream false and
/// kv_transfer_params {"do_remote_decode": true}; producers are chosen like backends (prefix
/// hashes, health, load) and another is tried while none answered, up to --max-retries. Any
/// other failure (an error status, no kv_transfer_params, --prefill-timeout) returns the body
/// unchanged: the decode engine prefills the request itself, so the answer is the same. A body
/// that is not a JSON object, or carries kv_transfer_params of its own, is passed on unchanged.
net::awaitable<std::string> prefill(Call& call) {
  using Json = nlohmann::json;
  RouterServer::Impl& router = call.router;
  BackendPool& producers = *router.prefill_pool;
  Json body = Json::parse(call.request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object() || body.contains("kv_transfer_params")) {
    co_return call.request.body;
  }
  // Bi-directional KV: the decode engine keeps the finished turn's KV, handed off or not.
  call.kv_return = router.options.bidirectional_kv;
  if (const auto salt = body.find("cache_salt"); salt != body.end() && salt->is_string())
    call.cache_salt = salt->get<std::string>();
  Json p = body;
  p["max_tokens"] = 1;
  if (p.contains("max_completion_tokens")) p["max_completion_tokens"] = 1;
  p["stream"] = false;
  p.erase("stream_options");
  p["kv_transfer_params"] = {{"do_remote_decode", true}};
  const std::string prefill_body = p.dump();
  std::vector<bool> tried(producers.size(), false);
  std::string why;
  for (int attempt_no = 0; attempt_no <= router.options.max_retries; ++attempt_no) {
    std::unique_ptr<Lease> lease = producers.assign(call.hashes, tried);
    if (!lease) {
      if (why.empty()) why = "no prefill backend is healthy";
      break;
    }
    const size_t b = lease->backend();
    call.producer = b;
    const size_t index = router.pool.size() + b;  // its metrics index
    RouteDecision decision = lease->decision();
    decision.backend = index;
    router.metrics.count_route(decision);
    PrefillAnswer answer = co_await prefill_once(call, b, prefill_body);
    call.backend.reset();
    if (call.cancelled) co_return call.request.body;
    if (answer.connect_failed) {
      router.metrics.count_request(index, Outcome::kConnectFailed);
      tried[b] = true;
      if (producers.set_healthy(b, false)) {
        spdlog::warn(
            "router: prefill backend {} failed ({}); it gets no requests until its next "
            "successful health check",
            producers.url(b), answer.error);
      }
      why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", producers.url(b), answer.error);
      router.metrics.count_retry(index);
      continue;
    }
    router.metrics.count_request(
        index, answer.status == 200
                   ? Outcome::kSuccess
                   : (answer.status == 0 ? Outcome::kBroken : Outcome::kErrorStatus));
    if (answer.status == 200) {
      const Json r = Json::parse(answer.body, nullptr, /*allow_exceptions=*/false);
      if (!r.is_discarded() && r.is_object() && r.contains("kv_transfer_params") &&
          r["kv_transfer_params"].is_object()) {
        body["kv_transfer_params"] = r["kv_transfer_params"];
        if (call.kv_return) body["kv_transfer_params"]["return_kv"] = true;
        router.metrics.count_prefill(true);
        co_return body.dump();
      }
      why = fmt::format("{} answered without kv_transfer_params", producers.url(b));
    } else {
      why = answer.status == 0 ? fmt::format("{}: {}", producers.url(b), answer.error)
                               : fmt::format("{} answered {}: {}", producers.url(b), answer.status,
                                             answer.body.substr(0, 300));
    }
    break;
  }
  spdlog::warn("router: prefill failed ({}); the decode engine prefills the request itself", why);
  router.metrics.count_prefill(false);
  if (call.kv_return) {
    body["kv_transfer_params"] = {{"return_kv", true}};
    co_return body.dump();
  }
  co_return call.request.body;
}

/// Bi-directional KV, after the client has its answer: asks the producer that prefilled the
/// turn (else the one the prefix policy picks) to import the turn's KV that the decode engine's
/// answer named, bounded by --prefill-timeout. Any failure only costs the next turn a recompute.
net::awaitable<void> import_turn(Call& call) {
  RouterServer::Impl& router = call.router;
  BackendPool& producers = *router.prefill_pool;
  const std::optional<std::string>& params = call.kv_scanner.params();
  if (!params) {
    router.metrics.count_kv_return(KVReturnOutcome::kNoHandOff);
    co_return;
  }
  std::vector<bool> tried(producers.size(), false);
  std::unique_ptr<Lease> lease;
  if (call.producer) {
    for (size_t i = 0; i < producers.size(); ++i) tried[i] = i != *call.producer;
    lease = producers.assign(call.hashes, tried);
  }
  if (!lease) lease = producers.assign(call.hashes, std::vector<bool>(producers.size(), false));
  if (!lease) {
    router.metrics.count_kv_return(KVReturnOutcome::kFailed);
    co_return;
  }
  const size_t b = lease->backend();
  const client::Endpoint& endpoint = producers.endpoint(b);
  error_code ec;
  auto on_error = net::redirect_error(net::use_awaitable, ec);
  tcp::resolver resolver(call.strand);
  const auto addresses = co_await resolver.async_resolve(endpoint.host, endpoint.port, on_error);
  std::string why;
  int status = 0;
  if (!ec) {
    beast::tcp_stream stream(call.strand);
    stream.expires_after(router.options.prefill_timeout);
    co_await stream.async_connect(addresses, on_error);
    static const std::string kTarget = "/v1/kv_transfer/import";
    auto req = backend_request(call, endpoint, kv_import_body(*params, call.cache_salt), &kTarget);
    if (!ec) co_await bhttp::async_write(stream, req, on_error);
    beast::flat_buffer buffer;
    bhttp::response<bhttp::string_body> res;
    if (!ec) co_await bhttp::async_read(stream, buffer, res, on_error);
    if (!ec) {
      status = static_cast<int>(res.result_int());
      if (status != 200) why = fmt::format("answered {}: {}", status, res.body().substr(0, 300));
    }
  }
  if (ec) why = ec.message();
  if (why.empty()) {
    router.metrics.count_kv_return(KVReturnOutcome::kImported);
  } else {
    spdlog::warn("router: importing a finished turn's KV into {} failed ({})", producers.url(b),
                 why);
    router.metrics.count_kv_return(KVReturnOutcome::kFailed);
  }
}

/// The whole forwarding of one request: attempts on backends until one answers, none is left,
/// or max_retries further attempts have failed.
net::awaitable<void> run(std::shared_ptr<Call> call) {
  RouterServer::Impl& router = call->router;
  if (router.prefill_pool && call->request.method == "POST" &&
      (call->request.path == "/v1/completions" || call->request.path == "/v1/chat/completions")) {
    std::string body = co_await prefill(*call);
    if (call->cancelled) co_return;
    call->request.body = std::move(body);
  }
  const size_t num_backends = router.pool.size();
  std::vector<bool> tried(num_backends, false);
  std::string failures;  // what each failed attempt saw, for the 502
  for (int attempt_no = 0;; ++attempt_no) {
    if (call->cancelled) co_return;
    std::unique_ptr<Lease> lease = router.pool.assign(call->hashes, tried);
    if (!lease) {
      if (failures.empty()) {
        router.metrics.count_request(std::nullopt, Outcome::kNoBackend);
        call->responder->send(
            error_response(503,
                           "no backend is healthy: every backend failed its last health "
                           "check or a request since"));
      } else {
        call->responder->send(error_response(
            502, fmt::format("every backend tried failed before answering ({}), and no other "
                             "healthy backend is left",
                             failures)));
      }
      co_return;
    }
    const size_t b = lease->backend();
    router.metrics.count_route(lease->decision());
    Attempt result;
    try {
      result = co_await attempt(*call, b);
    } catch (const std::exception& e) {
      // A bug or an allocation failure; the client still gets an answer.
      spdlog::error("router: forwarding to {} failed: {}", router.pool.url(b), e.what());
      result = count_end(*call, b, Outcome::kBroken, e.what());
      if (!call->responder->answered()) {
        call->responder->send(error_response(500, e.what()));
      } else {
        call->responder->end();
      }
    }
    call->backend.reset();
    if (result.outcome == Outcome::kConnectFailed) {
      router.metrics.count_request(b, result.outcome);
    } else {
      if (!result.counted) (void)count_end(*call, b, result.outcome);
      lease.reset();  // the decode engine is done with the request
      if (call->kv_return && result.outcome == Outcome::kSuccess) co_await import_turn(*call);
      co_return;
    }
    tried[b] = true;
    if (router.pool.set_healthy(b, false)) {
      spdlog::warn(
          "router: backend {} failed ({}); it gets no requests until its next "
          "successful health check",
          router.pool.url(b), result.error);
    }
    if (!failures.empty()) failures += "; ";
    failures += router.pool.url(b) + ": " + result.error;
    if (attempt_no >= router.options.max_retries) {
      call->responder->send(error_response(
          502, fmt::format("the request failed before any backend answered ({}) and was tried "
                           "{} time(s), the --max-retries limit",
                           failures, attempt_no + 1)));
      co_return;
    }
    router.metrics.count_retry(b);
  }
}

}  // namespace

void RouterServer::Impl::forward(http::HttpRequest request,
                                 std::shared_ptr<http::Responder> responder,
                                 std::vector<uint64_t> hashes) {
  auto call = std::make_shared<Call>(*this, std::move(request), responder, std::move(hashes));
  // The client leaving closes the backend connection: the engine aborts the request.
  responder->on_disconnect([weak = std::weak_ptr<Call>(call)] {
    auto c = weak.lock();
    if (!c) return;
    net::post(c->strand, [c] {
      c->cancelled = true;
      if (c->backend) c->backend->close();
    });
  });
  net::co_spawn(call->strand, run(call), net::detached);
}

}  // namespace pagoda::router
