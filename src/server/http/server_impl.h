#pragma once
// Internals of HttpServer shared by http_server.cc (acceptor, lifecycle) and session.cc (one
// connection). Includes Boost: include it only from this folder's .cc files.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/http/http_server.h"
#include "server/http/router.h"

namespace pagoda::http {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using Strand = net::strand<net::io_context::executor_type>;

class Session;

/// What the acceptor, the sessions and the owning HttpServer share. Sessions hold it by
/// shared_ptr, so it outlives the last connection even if the HttpServer goes first.
struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  explicit Impl(HttpServerOptions opts);

  /// Finds the route and runs the handler, turning a missing route or an exception into an
  /// error response. Runs on the session's strand.
  void dispatch(HttpRequest request, const std::shared_ptr<Responder>& responder) const;
  /// A complete error response in the configured body format.
  [[nodiscard]] HttpResponse error_response(int status, std::string_view message) const;

  void do_accept();
  /// A session for an accepted connection (or a close, when draining).
  void start_session(tcp::socket socket, const Strand& strand);
  /// do_accept() again in a little while (a transient accept error).
  void retry_accept_later(boost::system::error_code ec);
  /// accept failed for want of descriptors: a pending connection is answered 503 through the
  /// reserve descriptor and the next one accepted at once; with none pending, waits for one.
  void accept_without_descriptors();
  /// A whole 503 response with Connection: close, for accept_without_descriptors().
  [[nodiscard]] std::string refusal_bytes() const;
  /// Logs a warning at most every 10 s (accept errors repeat as fast as connections arrive).
  void warn_rarely(const std::string& message);
  void add_session(const std::shared_ptr<Session>& session);
  void remove_session(uint64_t id);
  /// Live sessions, for shutdown to post to.
  [[nodiscard]] std::vector<std::shared_ptr<Session>> sessions_snapshot();

  HttpServerOptions options;
  Router router;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  Strand accept_strand;
  tcp::acceptor acceptor;
  net::steady_timer accept_retry;
  int reserve_fd = -1;  // a descriptor kept free for refusing connections when they run out
  std::chrono::steady_clock::time_point last_warning{};
  std::vector<std::thread> threads;
  uint16_t port = 0;
  bool started = false;
  std::atomic<bool> stopped{false};
  std::atomic<bool> draining{false};  // shutting down: no new connections or requests
  std::atomic<size_t> num_open{0};    // sockets open
  std::atomic<size_t> num_active{0};  // requests read and not yet answered in full

  std::mutex sessions_mutex;
  uint64_t next_session_id = 0;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;
};

/// What a Responder and its session share about one request, readable from any thread.
struct RequestState {
  uint64_t seq = 0;                  // the request's number on its connection
  std::atomic<bool> claimed{false};  // send() or start_stream() was called
  std::atomic<bool> peer_gone{false};
};

/// One connection: reads requests one at a time (keep-alive), hands each to the router, and writes
/// the answer from a queue, all on its strand. While a request is being answered it keeps a read
/// pending so that a client going away is noticed at once.
class Session : public std::enable_shared_from_this<Session> {
 public:
  /// `socket` was accepted with `strand` as its executor. A session that `refuse`s reads one
  /// request and answers it 503 (the server is at max_connections).
  Session(tcp::socket socket, Strand strand, std::shared_ptr<HttpServer::Impl> server, uint64_t id,
          bool refuse = false);
  ~Session();

  [[nodiscard]] uint64_t id() const { return id_; }
  [[nodiscard]] const Strand& strand() const { return strand_; }

  /// Each of these must run on the strand (post them).
  void start();
  void drain();        // server stopping: close now if no request is being answered
  void force_close();  // server stopping, grace over: close, firing disconnect callbacks

  void do_send(uint64_t seq, HttpResponse response);
  void do_start_stream(uint64_t seq, int status, std::string content_type, Headers headers);
  void do_write(uint64_t seq, std::string data);
  void do_end(uint64_t seq);
  void do_on_disconnect(uint64_t seq, std::function<void()> callback);
  void do_release(uint64_t seq);  // the Responder was dropped

 private:
  enum class Phase { kReading, kHandling, kAwaitingNext, kLingering, kClosed };

  void read_next();
  void on_header(boost::system::error_code ec);
  void read_body();
  void on_body(boost::system::error_code ec);
  void on_read_error(boost::system::error_code ec);
  void reply_and_close(int status, std::string_view message, Headers headers = {});

  void start_watch();
  void on_watch(boost::system::error_code ec, size_t n);

  void enqueue(std::string bytes);
  void write_queued();
  void on_written(boost::system::error_code ec);
  void finish_response();

  void linger_close();
  void close_quietly();
  void lose_peer();
  void mark_closed();

  using TimeoutFn = void (Session::*)();
  void arm(net::steady_timer& timer, std::chrono::milliseconds after, TimeoutFn on_expiry);
  static void disarm(net::steady_timer& timer);
  void on_read_timeout();
  void on_write_timeout();

  std::shared_ptr<HttpServer::Impl> server_;
  uint64_t id_;
  Strand strand_;
  tcp::socket socket_;
  std::string remote_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;

  Phase phase_ = Phase::kReading;
  bool first_request_ = true;
  bool idle_ = false;                   // reading, under the keep-alive timeout (no request yet)
  bool refuse_ = false;                 // answer the request 503 (max_connections reached)
  bool counted_ = false;                // counted in server_->num_active
  bool open_ = false;                   // counted in server_->num_open
  std::shared_ptr<Session> self_hold_;  // alive while a request is answered, whatever is pending

  // The request being answered.
  std::shared_ptr<RequestState> request_;
  uint64_t seq_ = 0;
  std::string method_, path_;  // for the access log
  bool keep_alive_ = true;
  bool http10_ = false;
  bool head_queued_ = false;
  bool streaming_ = false;
  bool body_complete_ = false;  // every byte of the answer is queued
  std::vector<std::function<void()>> disconnect_callbacks_;

  // Reads: the watch read that notices a departing client (and buffers pipelined bytes).
  bool watching_ = false;

  // Writes: queued byte strings, written in batches by one async_write at a time.
  std::deque<std::string> write_queue_;
  std::vector<net::const_buffer> write_buffers_;
  size_t write_batch_ = 0;
  bool writing_ = false;
};

}  // namespace pagoda::http
