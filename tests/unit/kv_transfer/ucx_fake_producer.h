#pragma once
// A UCX producer that the test drives by hand (on the test's thread, no loop thread): it accepts
// one consumer, takes its pull, answers it as the real producer would (the reply header, token
// ids, checksums and a memory key for the blocks) and then dies (endpoint, worker and context
// gone) before the consumer has read the blocks. Over UCX's tcp transport the consumer's get
// needs the producer, so it fails: the UCX form of "the producer dies mid-transfer".
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "kv_transfer/ucx_worker.h"
#include "kv_transfer/wire.h"

namespace pagoda::kv_transfer::testing {

class UcxFakeProducer {
 public:
  explicit UcxFakeProducer(const std::string& tls)
      : ucx_(std::make_unique<UcxWorker>(UcxOptions{tls})) {
    ucx_->set_am_handler(kUcxAmPull, &UcxFakeProducer::on_pull, this);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&a);
    lp.sockaddr.addrlen = sizeof a;
    lp.conn_handler.cb = [](ucp_conn_request_h r, void* arg) {
      static_cast<UcxFakeProducer*>(arg)->request_ = r;
    };
    lp.conn_handler.arg = this;
    EXPECT_EQ(ucp_listener_create(ucx_->worker(), &lp, &listener_), UCS_OK);
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    EXPECT_EQ(ucp_listener_query(listener_, &attr), UCS_OK);
    port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
  }
  ~UcxFakeProducer() { die(); }

  [[nodiscard]] int port() const { return port_; }

  /// Progresses until a consumer has connected and its pull has arrived.
  void await_pull() {
    ucx_->drain(
        [this] {
          if (request_ != nullptr) accept();
          return pulled_;
        },
        /*max_rounds=*/1 << 30);
  }

  /// Answers the pull with `kv`'s header, token ids, checksums and a key to a copy of its
  /// blocks, waits until the answer has left, and dies.
  void answer_and_die(const ExportedKV& kv) {
    blocks_ = kv.bytes;
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = blocks_.data();
    mp.length = blocks_.size();
    ASSERT_EQ(ucp_mem_map(ucx_->context(), &mp, &memh_), UCS_OK);
    void* rkey = nullptr;
    size_t rkey_len = 0;
    ASSERT_EQ(ucp_rkey_pack(ucx_->context(), memh_, &rkey, &rkey_len), UCS_OK);
    ReplyHeader reply;
    reply.fingerprint = kv.fingerprint;
    reply.num_blocks = static_cast<uint32_t>(kv.num_blocks());
    reply.block_size = static_cast<uint32_t>(kv.block_size);
    reply.block_bytes = static_cast<uint64_t>(kv.block_bytes);
    UcxRegion region;
    region.address = reinterpret_cast<uint64_t>(blocks_.data());
    region.length = blocks_.size();
    region.rkey_len = static_cast<uint32_t>(rkey_len);
    append(&reply, sizeof reply);
    append(kv.token_ids.data(), kv.token_ids.size() * sizeof(int32_t));
    append(kv.checksums.data(), kv.checksums.size() * sizeof(uint64_t));
    append(&region, sizeof region);
    append(rkey, rkey_len);
    ucp_rkey_buffer_release(rkey);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
    bool sent = false;
    ucx_call(
        p,
        [&](const ucp_request_param_t& rp) {
          return ucp_am_send_nbx(ep_, kUcxAmReply, &header_, sizeof header_, message_.data(),
                                 message_.size(), &rp);
        },
        [&](ucs_status_t) { sent = true; });
    ucx_->drain([&] { return sent; }, /*max_rounds=*/1 << 30);
    die();
  }

 private:
  static ucs_status_t on_pull(void* arg, const void* header, size_t header_length, void*, size_t,
                              const ucp_am_recv_param_t*) {
    auto* self = static_cast<UcxFakeProducer*>(arg);
    EXPECT_EQ(header_length, sizeof(UcxAmHeader));
    std::memcpy(&self->header_, header, sizeof(UcxAmHeader));
    self->pulled_ = true;
    return UCS_OK;
  }

  void accept() {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.conn_request = std::exchange(request_, nullptr);
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = [](void*, ucp_ep_h, ucs_status_t) {};
    EXPECT_EQ(ucp_ep_create(ucx_->worker(), &p, &ep_), UCS_OK);
  }

  void append(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    message_.insert(message_.end(), b, b + n);
  }

  // As a killed process: nothing is flushed or told; the connection just ends.
  void die() {
    if (ucx_ == nullptr) return;
    if (ep_ != nullptr) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      const ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &p);
      if (UCS_PTR_IS_PTR(r)) {
        ucx_->drain([r] { return ucp_request_check_status(r) != UCS_INPROGRESS; });
        ucp_request_free(r);
      }
    }
    if (memh_ != nullptr) ucp_mem_unmap(ucx_->context(), memh_);
    ucp_listener_destroy(listener_);
    ucx_.reset();
  }

  std::unique_ptr<UcxWorker> ucx_;
  ucp_listener_h listener_ = nullptr;
  ucp_conn_request_h request_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  int port_ = 0;
  bool pulled_ = false;
  UcxAmHeader header_;
  std::vector<std::byte> message_;
  std::vector<std::byte> blocks_;
};

}  // namespace pagoda::kv_transfer::testing
