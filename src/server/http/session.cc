// One connection of the HTTP server: read a request, dispatch it, write its answer (whole or as a
// chunked stream) and read the next one, with every step on the connection's strand.
#include <algorithm>
#include <cctype>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include "core/logging.h"
#include "server/http/server_impl.h"
#include "server/http/wire.h"

namespace pagoda::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

// While an answer is being written, pipelined bytes of later requests are buffered up to this
// size; past it the connection stops reading (and stops noticing disconnects) until its turn.
constexpr size_t kMaxPipelinedBytes = 64 * 1024;
constexpr size_t kWatchReadBytes = 4096;
constexpr size_t kMaxWriteBatch = 64;
// After an error answer that leaves a request body unread, keep reading (and discarding) for a
// while before closing, so that the kernel does not reset the connection under the answer.
constexpr std::chrono::milliseconds kLingerTime{2000};

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

/// The Responder of one request: every call posts to the session's strand. Holds the session
/// weakly, so a handler that keeps its Responder never keeps a closed connection alive.
class SessionResponder final : public Responder {
 public:
  SessionResponder(const std::shared_ptr<Session>& session, std::shared_ptr<RequestState> state)
      : session_(session), state_(std::move(state)) {}

  ~SessionResponder() override {
    if (auto s = session_.lock()) {
      net::post(s->strand(), [s, seq = state_->seq] { s->do_release(seq); });
    }
  }

  void send(HttpResponse response) override {
    if (state_->claimed.exchange(true)) {
      spdlog::warn("http: a second answer to one request was ignored");
      return;
    }
    if (auto s = session_.lock()) {
      net::post(s->strand(), [s, seq = state_->seq, r = std::move(response)]() mutable {
        s->do_send(seq, std::move(r));
      });
    }
  }

  void start_stream(int status, std::string content_type, Headers headers) override {
    if (state_->claimed.exchange(true)) {
      spdlog::warn("http: a second answer to one request was ignored");
      return;
    }
    if (auto s = session_.lock()) {
      net::post(s->strand(), [s, seq = state_->seq, status, ct = std::move(content_type),
                              h = std::move(headers)]() mutable {
        s->do_start_stream(seq, status, std::move(ct), std::move(h));
      });
    }
  }

  void write(std::string data) override {
    if (data.empty()) return;
    if (auto s = session_.lock()) {
      net::post(s->strand(), [s, seq = state_->seq, d = std::move(data)]() mutable {
        s->do_write(seq, std::move(d));
      });
    }
  }

  void end() override {
    if (auto s = session_.lock()) {
      net::post(s->strand(), [s, seq = state_->seq] { s->do_end(seq); });
    }
  }

  void on_disconnect(std::function<void()> callback) override {
    if (!callback) return;
    if (state_->peer_gone.load()) {
      callback();
      return;
    }
    auto s = session_.lock();
    if (!s) {
      // The session is gone: it either finished this answer or lost its client.
      if (state_->peer_gone.load()) callback();
      return;
    }
    net::post(s->strand(), [s, seq = state_->seq, cb = std::move(callback)]() mutable {
      s->do_on_disconnect(seq, std::move(cb));
    });
  }

  [[nodiscard]] bool disconnected() const override { return state_->peer_gone.load(); }
  [[nodiscard]] bool answered() const override { return state_->claimed.load(); }

 private:
  std::weak_ptr<Session> session_;
  std::shared_ptr<RequestState> state_;
};

std::string_view view(boost::beast::string_view s) { return {s.data(), s.size()}; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Session::Session(tcp::socket socket, Strand strand, std::shared_ptr<HttpServer::Impl> server,
                 uint64_t id, bool refuse)
    : server_(std::move(server)),
      id_(id),
      strand_(std::move(strand)),
      socket_(std::move(socket)),
      read_timer_(strand_),
      write_timer_(strand_) {
  error_code ec;
  auto endpoint = socket_.remote_endpoint(ec);
  if (!ec) remote_ = endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
  refuse_ = refuse;
  open_ = true;
  server_->num_open.fetch_add(1);
}

Session::~Session() {
  if (counted_) server_->num_active.fetch_sub(1);
  if (open_) server_->num_open.fetch_sub(1);
  server_->remove_session(id_);
}

void Session::start() { read_next(); }

// ---- Reading requests -------------------------------------------------------------------------

void Session::read_next() {
  if (phase_ == Phase::kClosed || phase_ == Phase::kLingering) return;
  if (server_->draining.load()) {
    close_quietly();
    return;
  }
  phase_ = Phase::kReading;
  parser_.emplace();
  parser_->body_limit(server_->options.max_request_body);
  parser_->header_limit(server_->options.max_header_bytes);
  // A new connection has the whole request timeout to send its first request; a kept-alive one
  // may idle for the keep-alive timeout (and the grace after it) before its next request begins,
  // and that request then has the request timeout (on_read_timeout).
  idle_ = !first_request_;
  arm(read_timer_,
      first_request_ ? server_->options.request_timeout
                     : server_->options.keep_alive_timeout + server_->options.keep_alive_grace,
      &Session::on_read_timeout);
  bhttp::async_read_header(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
}

void Session::on_header(error_code ec) {
  if (phase_ != Phase::kReading) return;
  if (ec) {
    on_read_error(ec);
    return;
  }
  if (idle_) {
    idle_ = false;
    arm(read_timer_, server_->options.request_timeout, &Session::on_read_timeout);
  }
  if (refuse_) {
    reply_and_close(503,
                    "the server is at its limit of " +
                        std::to_string(server_->options.max_connections) +
                        " open connections; retry later",
                    {{"Retry-After", "1"}});
    return;
  }
  const auto& head = parser_->get();
  // RFC 9112 3.2: an HTTP/1.1 request carries exactly one Host header.
  if (head.version() >= 11 && head.count(bhttp::field::host) != 1) {
    reply_and_close(400, head.count(bhttp::field::host) == 0
                             ? "the request has no Host header"
                             : "the request has more than one Host header");
    return;
  }
  // Bodies are read as sent: a compressed one would be taken for its bytes (RFC 9110 15.5.16).
  const auto encoding = head[bhttp::field::content_encoding];
  if (head.count(bhttp::field::content_encoding) > 1 ||
      (!encoding.empty() && !beast::iequals(encoding, "identity"))) {
    reply_and_close(415,
                    "Content-Encoding " + std::string(view(encoding)) +
                        " is not supported: send the body uncompressed (identity)",
                    {{"Accept-Encoding", "identity"}});
    return;
  }
  auto expect = parser_->get()[bhttp::field::expect];
  if (!parser_->is_done() && beast::iequals(expect, "100-continue")) {
    net::async_write(socket_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this()](error_code ec, size_t) {
                       if (self->phase_ != Phase::kReading) return;
                       if (ec) {
                         self->close_quietly();
                         return;
                       }
                       self->read_body();
                     });
    return;
  }
  read_body();
}

void Session::read_body() {
  bhttp::async_read(socket_, buffer_, *parser_,
                    [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
}

void Session::on_read_error(error_code ec) {
  if (ec == bhttp::error::body_limit) {
    reply_and_close(413, "the request body exceeds " +
                             std::to_string(server_->options.max_request_body) + " bytes");
  } else if (ec == bhttp::error::header_limit) {
    reply_and_close(431, "the request header exceeds " +
                             std::to_string(server_->options.max_header_bytes) + " bytes");
  } else if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
             ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    reply_and_close(400, "malformed HTTP request: " + ec.message());
  } else {
    close_quietly();  // closed, reset or timed out before a whole request arrived
  }
}

void Session::reply_and_close(int status, std::string_view message, Headers headers) {
  disarm(read_timer_);
  phase_ = Phase::kHandling;
  self_hold_ = shared_from_this();
  request_ = std::make_shared<RequestState>();
  request_->seq = ++seq_;
  request_->claimed = true;
  method_ =
      parser_ && parser_->is_header_done() ? std::string(view(parser_->get().method_string())) : "";
  path_ = parser_ && parser_->is_header_done() ? std::string(view(parser_->get().target())) : "";
  keep_alive_ = false;
  head_queued_ = streaming_ = body_complete_ = false;
  HttpResponse response = server_->error_response(status, message);
  for (auto& header : headers) response.headers.push_back(std::move(header));
  do_send(seq_, std::move(response));
}

void Session::on_body(error_code ec) {
  if (phase_ != Phase::kReading) return;
  disarm(read_timer_);
  if (ec) {
    on_read_error(ec);
    return;
  }
  first_request_ = false;
  auto message = parser_->release();
  parser_.reset();

  HttpRequest request;
  request.method = std::string(view(message.method_string()));
  request.target = std::string(view(message.target()));
  auto question = request.target.find('?');
  request.path = request.target.substr(0, question);
  if (question != std::string::npos) request.query = request.target.substr(question + 1);
  for (const auto& field : message) {
    request.headers.emplace_back(lower(view(field.name_string())),
                                 std::string(view(field.value())));
  }
  request.body = std::move(message.body());
  request.remote = remote_;
  request.arrival = std::chrono::steady_clock::now();

  phase_ = Phase::kHandling;
  self_hold_ = shared_from_this();
  keep_alive_ = message.keep_alive();
  http10_ = message.version() < 11;
  head_queued_ = streaming_ = body_complete_ = false;
  disconnect_callbacks_.clear();
  request_ = std::make_shared<RequestState>();
  request_->seq = ++seq_;
  method_ = request.method;
  path_ = request.path;
  counted_ = true;
  server_->num_active.fetch_add(1);

  start_watch();
  auto responder = std::make_shared<SessionResponder>(shared_from_this(), request_);
  server_->dispatch(std::move(request), responder);
}

// ---- Watching for the client leaving ----------------------------------------------------------

void Session::start_watch() {
  if (watching_ || phase_ == Phase::kClosed) return;
  if (phase_ == Phase::kLingering) buffer_.clear();
  if (buffer_.size() >= kMaxPipelinedBytes) return;
  watching_ = true;
  socket_.async_read_some(
      buffer_.prepare(kWatchReadBytes),
      [self = shared_from_this()](error_code ec, size_t n) { self->on_watch(ec, n); });
}

void Session::on_watch(error_code ec, size_t n) {
  watching_ = false;
  if (!ec) buffer_.commit(n);
  switch (phase_) {
    case Phase::kHandling:
      if (!ec) {
        start_watch();
      } else if (ec != net::error::operation_aborted) {
        lose_peer();  // end of stream or reset while the answer is being made
      }
      return;
    case Phase::kAwaitingNext:  // the answer is written; the watch was cancelled or raced it
      if (!ec || ec == net::error::operation_aborted) {
        read_next();
      } else {
        close_quietly();
      }
      return;
    case Phase::kLingering:
      if (!ec) {
        start_watch();
      } else {
        close_quietly();
      }
      return;
    default:
      return;
  }
}

// ---- Answers from the Responder ---------------------------------------------------------------

void Session::do_send(uint64_t seq, HttpResponse response) {
  if (seq != seq_ || phase_ != Phase::kHandling || head_queued_) return;
  head_queued_ = true;
  if (server_->draining.load()) keep_alive_ = false;
  spdlog::debug("http: {} \"{} {}\" {}", remote_, method_, path_, response.status);
  HeadSpec head;
  head.status = response.status;
  head.content_type = response.content_type;
  head.headers = &response.headers;
  head.content_length = static_cast<long long>(response.body.size());
  head.keep_alive = keep_alive_;
  head.http10 = http10_;
  head.keep_alive_seconds = keep_alive_header_seconds(server_->options.keep_alive_timeout);
  body_complete_ = true;
  std::string bytes = serialize_head(head);
  if (response.body.size() <= 16 * 1024) {
    bytes += response.body;
    enqueue(std::move(bytes));
  } else {
    enqueue(std::move(bytes));
    enqueue(std::move(response.body));
  }
}

void Session::do_start_stream(uint64_t seq, int status, std::string content_type, Headers headers) {
  if (seq != seq_ || phase_ != Phase::kHandling || head_queued_) return;
  head_queued_ = true;
  streaming_ = true;
  // An HTTP/1.0 peer cannot read chunks: its stream ends when the connection closes.
  if (server_->draining.load() || http10_) keep_alive_ = false;
  spdlog::debug("http: {} \"{} {}\" {} (stream)", remote_, method_, path_, status);
  headers.emplace_back("Cache-Control", "no-cache");
  HeadSpec head;
  head.status = status;
  head.content_type = content_type;
  head.headers = &headers;
  head.content_length = -1;
  head.keep_alive = keep_alive_;
  head.http10 = http10_;
  head.keep_alive_seconds = keep_alive_header_seconds(server_->options.keep_alive_timeout);
  enqueue(serialize_head(head));
}

void Session::do_write(uint64_t seq, std::string data) {
  if (seq != seq_ || phase_ != Phase::kHandling || !streaming_ || body_complete_) return;
  if (data.empty()) return;
  enqueue(http10_ ? std::move(data) : frame_chunk(data));
}

void Session::do_end(uint64_t seq) {
  if (seq != seq_ || phase_ != Phase::kHandling || !streaming_ || body_complete_) return;
  body_complete_ = true;
  if (!http10_) enqueue(std::string(kLastChunk));
  if (!writing_) finish_response();
}

void Session::do_on_disconnect(uint64_t seq, std::function<void()> callback) {
  if (seq != seq_) return;  // that answer is complete
  if (request_ && request_->peer_gone.load()) {
    callback();
    return;
  }
  if (phase_ == Phase::kHandling) disconnect_callbacks_.push_back(std::move(callback));
}

void Session::do_release(uint64_t seq) {
  if (seq != seq_ || phase_ != Phase::kHandling) return;
  if (!head_queued_) {
    spdlog::error("http: the handler of {} {} dropped its request unanswered", method_, path_);
    do_send(seq, server_->error_response(500, "the server did not answer the request"));
  } else if (streaming_ && !body_complete_) {
    do_end(seq);
  }
}

// ---- Writing ----------------------------------------------------------------------------------

void Session::enqueue(std::string bytes) {
  write_queue_.push_back(std::move(bytes));
  if (!writing_) write_queued();
}

void Session::write_queued() {
  writing_ = true;
  write_batch_ = std::min(write_queue_.size(), kMaxWriteBatch);
  write_buffers_.clear();
  for (size_t i = 0; i < write_batch_; ++i) write_buffers_.push_back(net::buffer(write_queue_[i]));
  arm(write_timer_, server_->options.write_timeout, &Session::on_write_timeout);
  net::async_write(socket_, write_buffers_,
                   [self = shared_from_this()](error_code ec, size_t) { self->on_written(ec); });
}

void Session::on_written(error_code ec) {
  writing_ = false;
  disarm(write_timer_);
  if (phase_ == Phase::kClosed) {
    write_queue_.clear();
    return;
  }
  if (ec) {
    lose_peer();
    return;
  }
  write_queue_.erase(write_queue_.begin(), write_queue_.begin() + write_batch_);
  if (!write_queue_.empty()) {
    write_queued();
  } else if (body_complete_) {
    finish_response();
  }
}

void Session::finish_response() {
  disconnect_callbacks_.clear();
  if (counted_) {
    counted_ = false;
    server_->num_active.fetch_sub(1);
  }
  self_hold_.reset();
  if (!keep_alive_ || server_->draining.load()) {
    linger_close();
    return;
  }
  phase_ = Phase::kAwaitingNext;
  if (watching_) {
    socket_.cancel();  // on_watch then reads the next request
  } else {
    read_next();
  }
}

// ---- Closing ----------------------------------------------------------------------------------

void Session::linger_close() {
  phase_ = Phase::kLingering;
  self_hold_.reset();
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  arm(read_timer_, kLingerTime, &Session::on_read_timeout);
  start_watch();
}

void Session::close_quietly() {
  if (phase_ == Phase::kClosed) return;
  if (phase_ == Phase::kHandling) {
    lose_peer();
    return;
  }
  phase_ = Phase::kClosed;
  mark_closed();
}

void Session::lose_peer() {
  if (phase_ == Phase::kClosed) return;
  const bool answering = phase_ == Phase::kHandling;
  phase_ = Phase::kClosed;
  if (request_ && answering) request_->peer_gone = true;
  mark_closed();
  auto callbacks = std::move(disconnect_callbacks_);
  disconnect_callbacks_.clear();
  if (answering) spdlog::debug("http: {} left during \"{} {}\"", remote_, method_, path_);
  for (auto& callback : callbacks) {
    try {
      callback();
    } catch (const std::exception& e) {
      spdlog::error("http: a disconnect callback threw: {}", e.what());
    }
  }
  self_hold_.reset();
}

void Session::mark_closed() {
  disarm(read_timer_);
  disarm(write_timer_);
  error_code ignored;
  socket_.close(ignored);
  if (counted_) {
    counted_ = false;
    server_->num_active.fetch_sub(1);
  }
  if (open_) {
    open_ = false;
    server_->num_open.fetch_sub(1);
  }
}

void Session::drain() {
  if (phase_ == Phase::kReading || phase_ == Phase::kAwaitingNext) close_quietly();
}

void Session::force_close() {
  if (phase_ == Phase::kHandling) {
    lose_peer();
  } else {
    close_quietly();
  }
}

// ---- Timers -----------------------------------------------------------------------------------

void Session::arm(net::steady_timer& timer, std::chrono::milliseconds after, TimeoutFn on_expiry) {
  timer.expires_after(after);
  timer.async_wait([self = shared_from_this(), &timer, on_expiry](error_code ec) {
    // A timer re-armed or disarmed after it fired has its expiry moved into the future.
    if (ec || timer.expiry() > std::chrono::steady_clock::now()) return;
    ((*self).*on_expiry)();
  });
}

void Session::disarm(net::steady_timer& timer) {
  timer.expires_at(std::chrono::steady_clock::time_point::max());
}

void Session::on_read_timeout() {
  if (phase_ == Phase::kReading && idle_) {
    // The keep-alive time is over, but if the next request has begun to arrive (bytes read, or
    // waiting in the socket: a busy server may not have read them yet), closing now would drop
    // it under the client. It gets the request timeout instead.
    error_code ec;
    if (buffer_.size() > 0 || socket_.available(ec) > 0) {
      idle_ = false;
      arm(read_timer_, server_->options.request_timeout, &Session::on_read_timeout);
      return;
    }
  }
  if (phase_ == Phase::kReading) {
    spdlog::debug("http: {} timed out sending a request", remote_);
    close_quietly();
  } else if (phase_ == Phase::kLingering) {
    close_quietly();
  }
}

void Session::on_write_timeout() {
  if (phase_ == Phase::kClosed) return;
  spdlog::debug("http: {} stopped reading; closing", remote_);
  if (phase_ == Phase::kHandling) {
    lose_peer();
  } else {
    close_quietly();
  }
}

}  // namespace pagoda::http
