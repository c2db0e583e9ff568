// Each request is a C++20 coroutine on a shared io_context: connect, write, then read the chunked
// body with a buffer_body parser so that every read returns as soon as bytes arrive (the
// timestamps of TTFT and ITL are taken there). A dispatcher coroutine on a strand releases the
// requests at their arrival times and holds them back while --max-concurrency are in flight.
#include "server/client/http_client.h"

#include <sys/resource.h>

#include <utility>  // before Asio 1.18, whose awaitable.hpp uses std::exchange unincluded

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/status.h"
#include "server/client/sse.h"

namespace pagoda::client {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// Not boost::none: Beast 1.74 compares a Content-Length against the optional limit with `>`, and
// every length is greater than an empty optional.
constexpr uint64_t kNoBodyLimit = std::numeric_limits<uint64_t>::max();

std::chrono::steady_clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

http::request<http::string_body> make_request(const Endpoint& endpoint, std::string_view path,
                                              const std::string& api_key, std::string_view body) {
  http::request<http::string_body> req{body.empty() ? http::verb::get : http::verb::post,
                                       endpoint.base_path + std::string(path), 11};
  req.set(http::field::host, endpoint.host + ":" + endpoint.port);
  req.set(http::field::user_agent, "pagoda-bench");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::string(body);
  }
  req.prepare_payload();
  return req;
}

/// Many sockets at once: lift the soft limit on open files to the hard one (1024 is common).
void raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

/// The shared state of one load run.
struct Load {
  Load(const Endpoint& endpoint, const std::vector<StreamRequest>& requests,
       const LoadOptions& options)
      : endpoint(endpoint),
        requests(requests),
        options(options),
        strand(asio::make_strand(io)),
        slot_freed(strand),
        results(requests.size()) {}

  /// Seconds since the load began.
  [[nodiscard]] double now() const {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  const Endpoint& endpoint;
  const std::vector<StreamRequest>& requests;
  const LoadOptions& options;
  asio::io_context io;
  tcp::resolver::results_type addresses;
  asio::strand<asio::io_context::executor_type> strand;
  asio::steady_timer slot_freed;  // on the strand: wakes the dispatcher
  int in_flight = 0;              // on the strand
  std::atomic<size_t> num_done{0};
  std::vector<StreamResult> results;
  Clock::time_point start;
};

asio::awaitable<void> stream_one(Load& load, size_t index) {
  StreamResult& r = load.results[index];
  const StreamRequest& request = load.requests[index];
  r.start_time = load.now();
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  try {
    stream.expires_after(to_duration(load.options.timeout_s));
    co_await stream.async_connect(load.addresses, asio::use_awaitable);
    auto req = make_request(load.endpoint, request.path, load.options.api_key, request.body);
    req.set(http::field::accept, "text/event-stream");
    stream.expires_after(to_duration(load.options.timeout_s));
    co_await http::async_write(stream, req, asio::use_awaitable);

    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(kNoBodyLimit);
    stream.expires_after(to_duration(load.options.timeout_s));
    co_await http::async_read_header(stream, buffer, parser, asio::use_awaitable);
    const int status = static_cast<int>(parser.get().result_int());
    SseParser sse;
    std::string error_body;
    double last_chunk_time = 0;
    bool done = false, ok = true;
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof(chunk);
      beast::error_code ec;
      stream.expires_after(to_duration(load.options.timeout_s));
      co_await http::async_read_some(stream, buffer, parser,
                                     asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) throw beast::system_error(ec);
      const size_t n = sizeof(chunk) - parser.get().body().size;
      if (n == 0) continue;
      if (status != 200) {
        error_body.append(chunk, n);
        continue;
      }
      const double now = load.now();
      for (const std::string& data : sse.feed(std::string_view(chunk, n))) {
        if (data == "[DONE]") {
          done = true;
        } else if (ok) {
          ok = apply_stream_chunk(data, now, r, last_chunk_time);
        }
      }
    }
    if (status != 200) {
      r.error = "HTTP " + std::to_string(status) + ": " + error_body;
    } else if (ok && !done) {
      r.error = "the stream ended without data: [DONE]";
    } else if (ok) {
      r.success = true;
      r.latency = (last_chunk_time > 0 ? last_chunk_time : load.now()) - r.start_time;
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  } catch (const std::exception& e) {
    r.success = false;
    r.error = e.what();
  }
}

asio::awaitable<void> run_and_release(Load& load, size_t index) {
  co_await stream_one(load, index);
  const size_t done = ++load.num_done;
  if (load.options.on_progress) load.options.on_progress(done);
  asio::post(load.strand, [&load] {
    --load.in_flight;
    load.slot_freed.cancel();
  });
}

/// Releases request i at its arrival time (absolute, so that waiting for a free slot does not
/// delay the later arrivals), once fewer than max_concurrency requests are in flight.
asio::awaitable<void> dispatch(Load& load) {
  std::mt19937_64 rng(load.options.seed);
  const double rate = load.options.request_rate;
  const double shape = load.options.burstiness;
  std::gamma_distribution<double> gap(shape, std::isinf(rate) ? 1.0 : 1.0 / (rate * shape));
  asio::steady_timer arrival(load.strand);
  double arrival_s = 0;
  for (size_t i = 0; i < load.requests.size(); ++i) {
    if (i > 0 && !std::isinf(rate)) {
      arrival_s += gap(rng);
      arrival.expires_at(load.start + to_duration(arrival_s));
      co_await arrival.async_wait(asio::use_awaitable);
    }
    while (load.options.max_concurrency > 0 && load.in_flight >= load.options.max_concurrency) {
      load.slot_freed.expires_at(Clock::time_point::max());
      beast::error_code ec;  // cancelled when a slot frees
      co_await load.slot_freed.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    ++load.in_flight;
    asio::co_spawn(load.io, run_and_release(load, i), asio::detached);
  }
}

}  // namespace

Endpoint parse_base_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    throw InvalidArgument(fmt::format("base URL '{}' must start with http://", url));
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  Endpoint e;
  e.base_path = std::string(path);
  const size_t colon = authority.rfind(':');
  if (colon == std::string_view::npos || authority.find(']', colon) != std::string_view::npos) {
    e.host = std::string(authority);
    e.port = "80";
  } else {
    e.host = std::string(authority.substr(0, colon));
    e.port = std::string(authority.substr(colon + 1));
  }
  if (!e.host.empty() && e.host.front() == '[' && e.host.back() == ']')
    e.host = e.host.substr(1, e.host.size() - 2);
  if (e.host.empty() || e.port.empty() ||
      e.port.find_first_not_of("0123456789") != std::string::npos) {
    throw InvalidArgument(fmt::format("base URL '{}' has no valid host and port", url));
  }
  return e;
}

HttpResponse http_request(const Endpoint& endpoint, std::string_view path,
                          const std::string& api_key, std::string_view body, double timeout_s) {
  asio::io_context io;
  tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  stream.expires_after(to_duration(timeout_s));
  stream.connect(resolver.resolve(endpoint.host, endpoint.port));
  http::write(stream, make_request(endpoint, path, api_key, body));
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kNoBodyLimit);
  http::read(stream, buffer, parser);
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return {static_cast<int>(parser.get().result_int()), std::move(parser.get().body())};
}

bool apply_stream_chunk(std::string_view data, double now, StreamResult& result,
                        double& last_chunk_time) {
  const nlohmann::json j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    result.error = "a stream chunk is not a JSON object: " + std::string(data.substr(0, 200));
    return false;
  }
  if (auto it = j.find("error"); it != j.end() && !it->is_null()) {
    result.error = "error event: " + it->dump();
    return false;
  }
  if (auto it = j.find("choices"); it != j.end() && it->is_array() && !it->empty()) {
    const nlohmann::json& choice = it->front();
    const nlohmann::json* text = nullptr;
    if (auto t = choice.find("text"); t != choice.end()) text = &*t;
    if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) {
      if (auto c = d->find("content"); c != d->end()) text = &*c;
    }
    // As vLLM's benchmark: the first chunk with choices is the first token, every later one an
    // inter-token gap (several tokens may arrive in one chunk). Unlike it, a chunk with neither
    // text nor a finish reason (a chat stream's opening role delta) is no token: a server may send
    // that one before the first token exists.
    const bool has_text =
        text != nullptr && text->is_string() && !text->get_ref<const std::string&>().empty();
    const auto finish = choice.find("finish_reason");
    if (!has_text && (finish == choice.end() || finish->is_null())) return true;
    if (last_chunk_time == 0) {
      result.ttft = now - result.start_time;
    } else {
      result.itl.push_back(now - last_chunk_time);
    }
    last_chunk_time = now;
    if (has_text) result.generated_text += text->get<std::string>();
  }
  if (auto it = j.find("usage"); it != j.end() && it->is_object()) {
    result.prompt_tokens = it->value("prompt_tokens", result.prompt_tokens);
    result.output_tokens = it->value("completion_tokens", result.output_tokens);
  }
  return true;
}

LoadResult run_streaming_load(const Endpoint& endpoint, const std::vector<StreamRequest>& requests,
                              const LoadOptions& options) {
  raise_open_file_limit();
  Load load(endpoint, requests, options);
  load.addresses = tcp::resolver(load.io).resolve(endpoint.host, endpoint.port);
  load.start = Clock::now();
  asio::co_spawn(load.strand, dispatch(load), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, options.num_threads); ++i)
    threads.emplace_back([&load] { load.io.run(); });
  load.io.run();
  for (std::thread& t : threads) t.join();
  LoadResult out;
  out.duration_s = load.now();
  out.results = std::move(load.results);
  return out;
}

}  // namespace pagoda::client
