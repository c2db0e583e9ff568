#include "kv_transfer/ucx_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/logging.h"
#include "core/status.h"
#include "kv_transfer/wire.h"

namespace pagoda::kv_transfer {
namespace {

using Clock = std::chrono::steady_clock;

// host:port as a socket address; false when `host` is not an IPv4 or IPv6 literal.
bool socket_address(const std::string& host, int port, sockaddr_storage& out, socklen_t& len) {
  out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

// The parameters of an active message of this protocol: eager (whole messages arrive at the
// handler, never a rendezvous descriptor) and naming the sender's endpoint for the reply.
ucp_request_param_t am_params() {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
  return p;
}

ucp_request_param_t close_params(bool force) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  return p;
}

// One active message as received, kept until the loop's tick handles it (UCX callbacks only
// record what happened; the tick acts, outside UCX's progress).
struct Received {
  ucp_ep_h ep = nullptr;
  uint64_t pull_id = 0;
  std::vector<std::byte> data;
};

// Records an active message of this protocol into `queue`; anything else is dropped.
ucs_status_t record(std::vector<Received>& queue, const void* header, size_t header_length,
                    const void* data, size_t length, const ucp_am_recv_param_t* param) {
  if (header_length != sizeof(UcxAmHeader) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
      !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
    return UCS_OK;
  }
  Received r;
  r.ep = param->reply_ep;
  std::memcpy(&r.pull_id, header, sizeof r.pull_id);
  const auto* bytes = static_cast<const std::byte*>(data);
  r.data.assign(bytes, bytes + length);
  queue.push_back(std::move(r));
  return UCS_OK;
}

// ---- Producer -------------------------------------------------------------------------------

class UcxKVServer final : public KVServer {
 public:
  UcxKVServer(KVExportStore& store, const std::string& host, int port, const UcxOptions& options)
      : store_(store), ucx_(options) {
    sockaddr_storage address;
    socklen_t length = 0;
    if (!socket_address(host, port, address, length)) {
      throw InvalidArgument(fmt::format("KV transfer host '{}' is not an IP address", host));
    }
    ucx_.set_am_handler(kUcxAmPull, &UcxKVServer::on_pull, this);
    ucx_.set_am_handler(kUcxAmDone, &UcxKVServer::on_done, this);
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&address);
    lp.sockaddr.addrlen = length;
    lp.conn_handler.cb = &UcxKVServer::on_conn_request;
    lp.conn_handler.arg = this;
    ucs_status_t status = ucp_listener_create(ucx_.worker(), &lp, &listener_);
    if (status != UCS_OK) {
      throw InvalidArgument(fmt::format("KV transfer port: cannot listen on {}:{} (UCX: {})", host,
                                        port, ucs_status_string(status)));
    }
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    status = ucp_listener_query(listener_, &attr);
    if (status != UCS_OK) {
      ucp_listener_destroy(listener_);
      throw Error(fmt::format("UCX: cannot query the listener ({})", ucs_status_string(status)));
    }
    port_ = ntohs(attr.sockaddr.ss_family == AF_INET6
                      ? reinterpret_cast<const sockaddr_in6*>(&attr.sockaddr)->sin6_port
                      : reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
    // As the TCP server: expired entries are freed every keep_timeout / 4, within [1 ms, 1 s].
    reap_every_ = std::clamp(store.keep_timeout() / 4, std::chrono::milliseconds(1),
                             std::chrono::milliseconds(1000));
    next_reap_ = Clock::now() + reap_every_;
    ucx_.start([this] { return tick(); });
  }

  ~UcxKVServer() override {
    ucx_.stop();
    ucp_listener_destroy(listener_);
    for (const ucp_conn_request_h request : conn_requests_) {
      (void)ucp_listener_reject(listener_, request);
    }
    std::vector<ucp_ep_h> eps;
    for (const auto& [ep, conn] : conns_) eps.push_back(ep);
    for (const ucp_ep_h ep : eps) close(ep, /*force=*/true);
    ucx_.drain([this] { return closing_ == 0; });
  }

  [[nodiscard]] int port() const override { return port_; }

 private:
  // A consumer's connection: one pull, then its blocks stay mapped until the consumer's done
  // message, its going away, or the keep timeout.
  struct Conn {
    Clock::time_point deadline;
    bool pulled = false;
    std::shared_ptr<const ExportedKV> kv;  // the blocks being read (null before the pull)
    ucp_mem_h memh = nullptr;              // kv->bytes mapped for the consumer's get
  };

  static void on_conn_request(ucp_conn_request_h request, void* arg) {
    static_cast<UcxKVServer*>(arg)->conn_requests_.push_back(request);
  }
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t /*status*/) {
    static_cast<UcxKVServer*>(arg)->failed_.push_back(ep);
  }
  static ucs_status_t on_pull(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param) {
    return record(static_cast<UcxKVServer*>(arg)->pulls_, header, header_length, data, length,
                  param);
  }
  static ucs_status_t on_done(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param) {
    return record(static_cast<UcxKVServer*>(arg)->dones_, header, header_length, data, length,
                  param);
  }

  Clock::time_point tick() {
    const Clock::time_point now = Clock::now();
    const bool acted =
        !conn_requests_.empty() || !failed_.empty() || !pulls_.empty() || !dones_.empty();
    for (const ucp_conn_request_h request : std::exchange(conn_requests_, {})) accept(request);
    for (Received& pull : std::exchange(pulls_, {})) serve(pull);
    for (const Received& done : std::exchange(dones_, {})) {
      const auto it = conns_.find(done.ep);
      if (it == conns_.end() || it->second.kv == nullptr) continue;
      store_.count_sent(it->second.kv->num_blocks());
      close(done.ep, /*force=*/false);
    }
    // Failures last: a consumer's done message and its going away can arrive in one round.
    for (const ucp_ep_h ep : std::exchange(failed_, {})) close(ep, /*force=*/true);
    Clock::time_point next = next_reap_;
    std::vector<ucp_ep_h> overdue;
    for (const auto& [ep, conn] : conns_) {
      if (now >= conn.deadline) overdue.push_back(ep);
      next = std::min(next, conn.deadline);
    }
    for (const ucp_ep_h ep : overdue) close(ep, /*force=*/true);
    if (now >= next_reap_) {
      store_.expire(now);
      next_reap_ = now + reap_every_;
    }
    return acted || !overdue.empty() ? now : std::min(next, next_reap_);
  }

  void accept(ucp_conn_request_h request) {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.conn_request = request;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = &UcxKVServer::on_ep_error;
    p.err_handler.arg = this;
    ucp_ep_h ep = nullptr;
    const ucs_status_t status = ucp_ep_create(ucx_.worker(), &p, &ep);
    if (status != UCS_OK) {
      spdlog::warn("KV transfer (UCX): cannot accept a consumer ({})", ucs_status_string(status));
      return;
    }
    conns_[ep].deadline = Clock::now() + store_.keep_timeout();
  }

  // Answers one pull: the entry's token ids, checksums and where its blocks are, mapped for the
  // consumer's get; or a refusal.
  void serve(const Received& pull) {
    const auto it = conns_.find(pull.ep);
    if (it == conns_.end() || it->second.pulled) return;  // one pull per connection
    Conn& conn = it->second;
    conn.pulled = true;
    PullHeader header;
    ReplyStatus status = ReplyStatus::kBadRequest;
    if (pull.data.size() >= sizeof header) {
      std::memcpy(&header, pull.data.data(), sizeof header);
      if (header.magic == kPullMagic && header.version == kWireVersion && header.id_len > 0 &&
          header.id_len <= kMaxRequestIdBytes &&
          pull.data.size() == sizeof header + header.id_len) {
        const std::string id(reinterpret_cast<const char*>(pull.data.data()) + sizeof header,
                             header.id_len);
        KVExportStore::TakeError error = KVExportStore::TakeError::kNone;
        conn.kv = store_.take(id, header.fingerprint, error);
        status = reply_status(error);
      }
    }
    std::vector<std::byte> rkey;
    if (conn.kv != nullptr && !conn.kv->bytes.empty() && !map(conn, rkey)) {
      conn.kv = nullptr;  // taken and lost: the consumer prefills itself
      status = ReplyStatus::kProducerError;
    }
    // The reply: ReplyHeader, then (kOk) token ids, checksums, UcxRegion and the packed rkey.
    auto message = std::make_shared<std::pair<UcxAmHeader, std::vector<std::byte>>>();
    message->first.pull_id = pull.pull_id;
    std::vector<std::byte>& body = message->second;
    ReplyHeader reply;
    reply.status = static_cast<uint32_t>(status);
    const auto append = [&body](const void* p, size_t n) {
      const auto* b = static_cast<const std::byte*>(p);
      body.insert(body.end(), b, b + n);
    };
    if (conn.kv != nullptr) {
      const ExportedKV& kv = *conn.kv;
      reply.fingerprint = kv.fingerprint;
      reply.num_blocks = static_cast<uint32_t>(kv.num_blocks());
      reply.block_size = static_cast<uint32_t>(kv.block_size);
      reply.block_bytes = static_cast<uint64_t>(kv.block_bytes);
      UcxRegion region;
      region.address = kv.bytes.empty() ? 0 : reinterpret_cast<uint64_t>(kv.bytes.data());
      region.length = kv.bytes.size();
      region.rkey_len = static_cast<uint32_t>(rkey.size());
      append(&reply, sizeof reply);
      append(kv.token_ids.data(), kv.token_ids.size() * sizeof(int32_t));
      append(kv.checksums.data(), kv.checksums.size() * sizeof(uint64_t));
      append(&region, sizeof region);
      append(rkey.data(), rkey.size());
    } else {
      append(&reply, sizeof reply);
    }
    const ucp_ep_h ep = pull.ep;
    // The message lives in the callback until the send has ended; a failed send needs nothing
    // here: the endpoint's error handler closes the connection.
    ucx_call(
        am_params(),
        [&](const ucp_request_param_t& p) {
          return ucp_am_send_nbx(ep, kUcxAmReply, &message->first, sizeof(UcxAmHeader), body.data(),
                                 body.size(), &p);
        },
        [message](ucs_status_t) {});
  }

  // Maps conn.kv's bytes for remote reads and packs their rkey into `rkey`.
  bool map(Conn& conn, std::vector<std::byte>& rkey) {
    ucp_mem_map_params_t p{};
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    p.address = const_cast<std::byte*>(conn.kv->bytes.data());
    p.length = conn.kv->bytes.size();
    ucs_status_t status = ucp_mem_map(ucx_.context(), &p, &conn.memh);
    void* packed = nullptr;
    size_t size = 0;
    if (status == UCS_OK) status = ucp_rkey_pack(ucx_.context(), conn.memh, &packed, &size);
    if (status != UCS_OK) {
      spdlog::warn("KV transfer (UCX): cannot map {} bytes of blocks ({})", p.length,
                   ucs_status_string(status));
      if (conn.memh != nullptr) ucp_mem_unmap(ucx_.context(), conn.memh);
      conn.memh = nullptr;
      return false;
    }
    const auto* b = static_cast<const std::byte*>(packed);
    rkey.assign(b, b + size);
    ucp_rkey_buffer_release(packed);
    return true;
  }

  // Ends a connection: unmaps its blocks and closes the endpoint (force: discarding what is
  // pending, for a failed or overdue one; else after what was sent has arrived).
  void close(ucp_ep_h ep, bool force) {
    const auto it = conns_.find(ep);
    if (it == conns_.end()) return;
    if (it->second.memh != nullptr) ucp_mem_unmap(ucx_.context(), it->second.memh);
    conns_.erase(it);
    ++closing_;
    ucx_call(
        close_params(force),
        [ep](const ucp_request_param_t& p) { return ucp_ep_close_nbx(ep, &p); },
        [this](ucs_status_t) { --closing_; });
  }

  KVExportStore& store_;
  UcxWorker ucx_;  // first built, last destroyed
  ucp_listener_h listener_ = nullptr;
  int port_ = 0;
  std::chrono::milliseconds reap_every_{1000};
  Clock::time_point next_reap_;
  std::unordered_map<ucp_ep_h, Conn> conns_;
  int closing_ = 0;  // endpoint closes not yet ended
  // Recorded by UCX callbacks, handled by the next tick.
  std::vector<ucp_conn_request_h> conn_requests_;
  std::vector<ucp_ep_h> failed_;
  std::vector<Received> pulls_;
  std::vector<Received> dones_;
};

// ---- Consumer -------------------------------------------------------------------------------

// One pull: connect, send the pull, take the reply, get the blocks, check them. A deadline closes
// the endpoint, which ends whatever operation is pending with an error; `done` runs once.
struct PullOp {
  PullRequest request;
  std::function<void(PullResult)> done;
  Clock::time_point start;
  Clock::time_point deadline;
  UcxAmHeader header;              // sent with the pull and the done message
  std::vector<std::byte> message;  // PullHeader, then the request id
  ucp_ep_h ep = nullptr;           // null once closed
  ucp_rkey_h rkey = nullptr;       // the producer's blocks
  std::shared_ptr<ExportedKV> kv;  // filled by the reply and the get
  int inflight = 0;                // UCX operations still writing into kv or reading message
  int64_t received = 0;            // bytes from the producer
  bool answered = false;           // the reply arrived
  bool finished = false;           // done has run
  bool read = false;               // the blocks were read (or there were none)
  const char* stage = "connecting";
};

class UcxKVPuller final : public KVPuller {
 public:
  explicit UcxKVPuller(const UcxOptions& options) : ucx_(options) {
    ucx_.set_am_handler(kUcxAmReply, &UcxKVPuller::on_reply, this);
    ucx_.start([this] { return tick(); });
  }

  ~UcxKVPuller() override {
    ucx_.stop();
    for (auto& [id, op] : ops_) {
      if (op->ep != nullptr) close(*op, /*force=*/true);
    }
    ucx_.drain([this] {
      return closing_ == 0 && std::all_of(ops_.begin(), ops_.end(),
                                          [](const auto& kv) { return kv.second->inflight == 0; });
    });
    for (auto& [id, op] : ops_) {
      if (op->rkey != nullptr) ucp_rkey_destroy(op->rkey);
    }
  }

  void pull(const PullRequest& request, std::function<void(PullResult)> done) override {
    const Clock::time_point start = Clock::now();
    ucx_.post([this, request, done = std::move(done), start] {
      const uint64_t id = next_id_++;
      auto& op = *ops_.emplace(id, std::make_unique<PullOp>()).first->second;
      op.request = request;
      op.done = done;
      op.start = start;
      op.deadline = start + request.timeout;
      op.header.pull_id = id;
      this->start(op);
    });
  }

 private:
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
    static_cast<UcxKVPuller*>(arg)->failed_.emplace_back(ep, status);
  }
  static ucs_status_t on_reply(void* arg, const void* header, size_t header_length, void* data,
                               size_t length, const ucp_am_recv_param_t* param) {
    return record(static_cast<UcxKVPuller*>(arg)->replies_, header, header_length, data, length,
                  param);
  }

  void start(PullOp& op) {
    sockaddr_storage address;
    socklen_t length = 0;
    if (!socket_address(op.request.host, op.request.port, address, length)) {
      return finish(op, fmt::format("the producer's transfer host '{}' is not an IP address",
                                    op.request.host));
    }
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&address);
    p.sockaddr.addrlen = length;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = &UcxKVPuller::on_ep_error;
    p.err_handler.arg = this;
    const ucs_status_t status = ucp_ep_create(ucx_.worker(), &p, &op.ep);
    if (status != UCS_OK) {
      op.ep = nullptr;
      return finish(op,
                    fmt::format("cannot connect to the producer: {}", ucs_status_string(status)));
    }
    ep_ops_[op.ep] = op.header.pull_id;
    PullHeader pull;
    pull.fingerprint = op.request.fingerprint;
    pull.id_len = static_cast<uint32_t>(op.request.remote_request_id.size());
    const auto* h = reinterpret_cast<const std::byte*>(&pull);
    const auto* id = reinterpret_cast<const std::byte*>(op.request.remote_request_id.data());
    op.message.assign(h, h + sizeof pull);
    op.message.insert(op.message.end(), id, id + pull.id_len);
    op.stage = "connecting or waiting for the reply";
    ++op.inflight;
    ucx_call(
        am_params(),
        [&op](const ucp_request_param_t& rp) {
          return ucp_am_send_nbx(op.ep, kUcxAmPull, &op.header, sizeof op.header, op.message.data(),
                                 op.message.size(), &rp);
        },
        [this, &op](ucs_status_t s) {
          --op.inflight;
          if (s != UCS_OK) peer_failed(op, s);
        });
  }

  // The reply: check it as the TCP transport does, then get the blocks.
  void on_reply(PullOp& op, const std::vector<std::byte>& data) {
    op.answered = true;
    op.received += static_cast<int64_t>(data.size());
    ReplyHeader reply;
    if (data.size() < sizeof reply) return finish(op, "a short reply from the producer");
    std::memcpy(&reply, data.data(), sizeof reply);
    if (std::string why = check_reply(reply, op.request); !why.empty()) return finish(op, why);
    op.kv = shape_of(reply);
    ExportedKV& kv = *op.kv;
    // Offsets in the reply. Example: 3 blocks of 16 tokens: token ids at [40, 232), checksums
    // at [232, 256), the region at [256, 280), the rkey from 280.
    const size_t tokens_at = sizeof reply;
    const size_t checksums_at = tokens_at + kv.token_ids.size() * sizeof(int32_t);
    const size_t region_at = checksums_at + kv.checksums.size() * sizeof(uint64_t);
    const size_t rkey_at = region_at + sizeof(UcxRegion);
    UcxRegion region;
    if (data.size() >= rkey_at) std::memcpy(&region, data.data() + region_at, sizeof region);
    if (data.size() < rkey_at || data.size() != rkey_at + region.rkey_len ||
        region.length != kv.bytes.size()) {
      return finish(op, "a malformed reply from the producer");
    }
    std::memcpy(kv.token_ids.data(), data.data() + tokens_at, checksums_at - tokens_at);
    std::memcpy(kv.checksums.data(), data.data() + checksums_at, region_at - checksums_at);
    if (kv.bytes.empty()) {
      op.read = true;
      return complete(op);
    }
    const ucs_status_t status = ucp_ep_rkey_unpack(op.ep, data.data() + rkey_at, &op.rkey);
    if (status != UCS_OK) {
      op.rkey = nullptr;
      return finish(op, fmt::format("cannot unpack the producer's memory key: {}",
                                    ucs_status_string(status)));
    }
    op.stage = "reading the blocks";
    ++op.inflight;
    ucx_call(
        ucp_request_param_t{},
        [&](const ucp_request_param_t& rp) {
          return ucp_get_nbx(op.ep, kv.bytes.data(), kv.bytes.size(), region.address, op.rkey, &rp);
        },
        [this, &op](ucs_status_t s) {
          --op.inflight;
          if (op.finished) return;
          if (s != UCS_OK) return peer_failed(op, s);
          op.read = true;
          op.received += static_cast<int64_t>(op.kv->bytes.size());
          complete(op);
        });
  }

  void complete(PullOp& op) {
    if (std::string why = check_blocks(*op.kv); !why.empty()) return finish(op, why);
    finish(op, "");
  }

  // The producer went away or refused the connection (the endpoint's error, or an operation's).
  void peer_failed(PullOp& op, ucs_status_t status) {
    finish(op, fmt::format("{}: {}",
                           op.answered ? "reading the blocks (the producer closed or died)"
                                       : "cannot connect to the producer, or it closed before "
                                         "answering",
                           ucs_status_string(status)));
  }

  // Runs `done` once: with the blocks when `error` is empty. The endpoint is closed by the next
  // tick (not from within a UCX callback).
  void finish(PullOp& op, const std::string& error) {
    if (op.finished) return;
    op.finished = true;
    PullResult result;
    if (error.empty()) {
      result.kv = std::move(op.kv);
    } else {
      result.error = Clock::now() >= op.deadline
                         ? fmt::format("the pull timed out after {} ms ({})",
                                       op.request.timeout.count(), error)
                         : error;
    }
    result.bytes_received = op.received;
    result.seconds = std::chrono::duration<double>(Clock::now() - op.start).count();
    op.done(std::move(result));
  }

  Clock::time_point tick() {
    const Clock::time_point now = Clock::now();
    bool acted = !failed_.empty() || !replies_.empty();
    // Replies first: a producer that answered and then died within one progress round did
    // answer (its blocks are what failed).
    for (const Received& reply : std::exchange(replies_, {})) {
      const auto it = ops_.find(reply.pull_id);
      if (it == ops_.end() || it->second->finished || it->second->answered) continue;
      on_reply(*it->second, reply.data);
    }
    for (const auto& [ep, status] : std::exchange(failed_, {})) {
      if (const auto it = ep_ops_.find(ep); it != ep_ops_.end()) {
        peer_failed(*ops_.at(it->second), status);
      }
    }
    Clock::time_point next = now + std::chrono::seconds(1);
    for (auto it = ops_.begin(); it != ops_.end();) {
      PullOp& op = *it->second;
      if (!op.finished && now >= op.deadline) finish(op, op.stage);
      if (op.finished && op.ep != nullptr) {
        // A pull that read the blocks (whether or not they passed their checksums) tells the
        // producer it may unmap and count them sent, as TCP counts them once written (the close
        // flushes that message first); any other is dropped at once, cancelling what is pending.
        if (op.read) send_done(op);
        close(op, /*force=*/!op.read);
        acted = true;
      }
      if (!op.finished) next = std::min(next, op.deadline);
      if (op.finished && op.inflight == 0 && op.ep == nullptr) {
        if (op.rkey != nullptr) ucp_rkey_destroy(op.rkey);
        it = ops_.erase(it);
      } else {
        ++it;
      }
    }
    return acted ? now : next;
  }

  void send_done(PullOp& op) {
    ++op.inflight;
    ucx_call(
        am_params(),
        [&op](const ucp_request_param_t& rp) {
          return ucp_am_send_nbx(op.ep, kUcxAmDone, &op.header, sizeof op.header, nullptr, 0, &rp);
        },
        [&op](ucs_status_t) { --op.inflight; });
  }

  void close(PullOp& op, bool force) {
    const ucp_ep_h ep = std::exchange(op.ep, nullptr);
    ep_ops_.erase(ep);
    ++closing_;
    ucx_call(
        close_params(force),
        [ep](const ucp_request_param_t& p) { return ucp_ep_close_nbx(ep, &p); },
        [this](ucs_status_t) { --closing_; });
  }

  UcxWorker ucx_;  // first built, last destroyed
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<PullOp>> ops_;  // by pull id
  std::unordered_map<ucp_ep_h, uint64_t> ep_ops_;              // open endpoints' pulls
  int closing_ = 0;
  // Recorded by UCX callbacks, handled by the next tick.
  std::vector<std::pair<ucp_ep_h, ucs_status_t>> failed_;
  std::vector<Received> replies_;
};

}  // namespace

std::unique_ptr<KVServer> make_ucx_kv_server(KVExportStore& store, const std::string& host,
                                             int port, const UcxOptions& options) {
  return std::make_unique<UcxKVServer>(store, host, port, options);
}

std::unique_ptr<KVPuller> make_ucx_kv_puller(const UcxOptions& options) {
  return std::make_unique<UcxKVPuller>(options);
}

}  // namespace pagoda::kv_transfer
