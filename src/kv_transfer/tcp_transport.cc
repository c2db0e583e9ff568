#include "kv_transfer/tcp_transport.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>

#include "core/status.h"
#include "kv_transfer/wire.h"

namespace pagoda::kv_transfer {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// ---- Producer -------------------------------------------------------------------------------

// One served pull: read the header and id, take the entry, write the reply and the blocks.
class ServeSession : public std::enable_shared_from_this<ServeSession> {
 public:
  ServeSession(tcp::socket socket, KVExportStore& store)
      : socket_(std::move(socket)), store_(store) {}

  void start() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(&pull_, sizeof(pull_)),
                     [self](boost::system::error_code ec, size_t) {
                       if (!ec) self->read_id();
                     });
  }

 private:
  void read_id() {
    if (pull_.magic != kPullMagic || pull_.version != kWireVersion || pull_.id_len == 0 ||
        pull_.id_len > kMaxRequestIdBytes) {
      reply(ReplyStatus::kBadRequest);
      return;
    }
    id_.resize(pull_.id_len);
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(id_), [self](boost::system::error_code ec, size_t) {
      if (!ec) self->serve();
    });
  }

  void serve() {
    // The fingerprint is checked before the entry is taken: a mismatched consumer leaves it for
    // the timeout (or a right one) and falls back to its own prefill.
    KVExportStore::TakeError error = KVExportStore::TakeError::kNone;
    kv_ = store_.take(id_, pull_.fingerprint, error);
    reply(reply_status(error));
  }

  void reply(ReplyStatus status) {
    header_.status = static_cast<uint32_t>(status);
    std::vector<asio::const_buffer> buffers{asio::buffer(&header_, sizeof(header_))};
    if (kv_ != nullptr) {
      header_.fingerprint = kv_->fingerprint;
      header_.num_blocks = static_cast<uint32_t>(kv_->num_blocks());
      header_.block_size = static_cast<uint32_t>(kv_->block_size);
      header_.block_bytes = static_cast<uint64_t>(kv_->block_bytes);
      buffers.push_back(asio::buffer(kv_->token_ids));
      buffers.push_back(asio::buffer(kv_->checksums));
      buffers.push_back(asio::buffer(kv_->bytes));
    }
    auto self = shared_from_this();
    asio::async_write(socket_, buffers, [self](boost::system::error_code ec, size_t) {
      if (!ec && self->kv_ != nullptr) self->store_.count_sent(self->kv_->num_blocks());
      boost::system::error_code ignored;
      self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
    });
  }

  tcp::socket socket_;
  KVExportStore& store_;
  PullHeader pull_{};
  std::string id_;
  ReplyHeader header_{};
  std::shared_ptr<const ExportedKV> kv_;  // held until the write completes
};

class TcpKVServer final : public KVServer {
 public:
  TcpKVServer(KVExportStore& store, const std::string& host, int port)
      : store_(store), acceptor_(io_), reaper_(io_) {
    boost::system::error_code ec;
    const asio::ip::address address = asio::ip::make_address(host, ec);
    if (ec) {
      throw InvalidArgument(fmt::format("KV transfer host '{}' is not an IP address", host));
    }
    const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw InvalidArgument(
          fmt::format("KV transfer port: cannot listen on {}:{} ({})", host, port, ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    // How often expired entries are freed: a quarter of the keep timeout, within [1 ms, 1 s].
    reap_every_ = std::clamp(store.keep_timeout() / 4, std::chrono::milliseconds(1),
                             std::chrono::milliseconds(1000));
    accept();
    reap();
    thread_ = std::thread([this] { io_.run(); });
  }

  ~TcpKVServer() override {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  [[nodiscard]] int port() const override { return port_; }

 private:
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) std::make_shared<ServeSession>(std::move(socket), store_)->start();
      accept();
    });
  }

  void reap() {
    reaper_.expires_after(reap_every_);
    reaper_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      store_.expire();
      reap();
    });
  }

  KVExportStore& store_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer reaper_;
  std::chrono::milliseconds reap_every_{1000};
  int port_ = 0;
  std::thread thread_;
};

// ---- Consumer -------------------------------------------------------------------------------

// One pull: resolve, connect, send the header and id, read the reply header, then the token ids,
// checksums and blocks, and check them. A deadline timer closes the socket, which ends whatever
// operation is pending with an error; `done` runs once.
class PullOp : public std::enable_shared_from_this<PullOp> {
 public:
  PullOp(asio::io_context& io, PullRequest request, std::function<void(PullResult)> done)
      : request_(std::move(request)),
        done_(std::move(done)),
        resolver_(io),
        socket_(io),
        deadline_(io),
        start_(Clock::now()) {}

  void start() {
    auto self = shared_from_this();
    deadline_.expires_after(request_.timeout);
    deadline_.async_wait([self](boost::system::error_code ec) {
      if (ec) return;
      self->timed_out_ = true;
      boost::system::error_code ignored;
      self->resolver_.cancel();
      self->socket_.close(ignored);
    });
    resolver_.async_resolve(
        request_.host, std::to_string(request_.port),
        [self](boost::system::error_code ec, const tcp::resolver::results_type& results) {
          if (ec) return self->fail("cannot resolve the producer's transfer host", ec);
          asio::async_connect(self->socket_, results,
                              [self](boost::system::error_code ec2, const tcp::endpoint&) {
                                if (ec2) return self->fail("cannot connect to the producer", ec2);
                                self->send();
                              });
        });
  }

 private:
  void send() {
    pull_.fingerprint = request_.fingerprint;
    pull_.id_len = static_cast<uint32_t>(request_.remote_request_id.size());
    const std::array<asio::const_buffer, 2> buffers{asio::buffer(&pull_, sizeof(pull_)),
                                                    asio::buffer(request_.remote_request_id)};
    auto self = shared_from_this();
    asio::async_write(socket_, buffers, [self](boost::system::error_code ec, size_t) {
      if (ec) return self->fail("sending the pull", ec);
      asio::async_read(self->socket_, asio::buffer(&self->reply_, sizeof(self->reply_)),
                       [self](boost::system::error_code ec2, size_t n) {
                         self->received_ += static_cast<int64_t>(n);
                         if (ec2) return self->fail("reading the reply", ec2);
                         self->check_header();
                       });
    });
  }

  void check_header() {
    if (const std::string why = check_reply(reply_, request_); !why.empty()) return fail(why);
    kv_ = shape_of(reply_);
    const std::array<asio::mutable_buffer, 3> buffers{
        asio::buffer(kv_->token_ids), asio::buffer(kv_->checksums), asio::buffer(kv_->bytes)};
    auto self = shared_from_this();
    asio::async_read(socket_, buffers, [self](boost::system::error_code ec, size_t got) {
      self->received_ += static_cast<int64_t>(got);
      if (ec) return self->fail("reading the blocks (the producer closed or died)", ec);
      self->verify();
    });
  }

  void verify() {
    if (const std::string why = check_blocks(*kv_); !why.empty()) return fail(why);
    PullResult result;
    result.kv = std::move(kv_);
    finish(std::move(result));
  }

  void fail(const std::string& what, boost::system::error_code ec = {}) {
    PullResult result;
    result.error = timed_out_ ? fmt::format("the pull timed out after {} ms ({})",
                                            request_.timeout.count(), what)
                   : ec       ? fmt::format("{}: {}", what, ec.message())
                              : what;
    finish(std::move(result));
  }

  void finish(PullResult result) {
    if (finished_) return;
    finished_ = true;
    boost::system::error_code ignored;
    deadline_.cancel();
    socket_.close(ignored);
    result.bytes_received = received_;
    result.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    done_(std::move(result));
  }

  PullRequest request_;
  std::function<void(PullResult)> done_;
  tcp::resolver resolver_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  Clock::time_point start_;
  PullHeader pull_{};
  ReplyHeader reply_{};
  std::shared_ptr<ExportedKV> kv_;
  int64_t received_ = 0;
  bool timed_out_ = false;
  bool finished_ = false;
};

class TcpKVPuller final : public KVPuller {
 public:
  TcpKVPuller() : work_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~TcpKVPuller() override {
    work_.reset();
    io_.stop();
    thread_.join();
  }

  void pull(const PullRequest& request, std::function<void(PullResult)> done) override {
    auto op = std::make_shared<PullOp>(io_, request, std::move(done));
    asio::post(io_, [op] { op->start(); });
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<KVServer> make_tcp_kv_server(KVExportStore& store, const std::string& host,
                                             int port) {
  return std::make_unique<TcpKVServer>(store, host, port);
}

std::unique_ptr<KVPuller> make_tcp_kv_puller() { return std::make_unique<TcpKVPuller>(); }

}  // namespace pagoda::kv_transfer
