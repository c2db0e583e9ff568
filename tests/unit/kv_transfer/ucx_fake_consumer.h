#pragma once
// A UCX consumer that the test drives by hand (on the test's thread, no loop thread): it connects
// to a producer, sends one pull, progresses until the reply has arrived and then dies (endpoint,
// worker and context gone) without reading the blocks or sending its done message: the UCX form
// of "the consumer dies after the producer accepted its pull". (The producer side's counterpart
// is ucx_fake_producer.h.)
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kv_transfer/ucx_worker.h"
#include "kv_transfer/wire.h"

namespace pagoda::kv_transfer::testing {

class UcxFakeConsumer {
 public:
  explicit UcxFakeConsumer(const std::string& tls)
      : ucx_(std::make_unique<UcxWorker>(UcxOptions{tls})) {
    ucx_->set_am_handler(kUcxAmReply, &UcxFakeConsumer::on_reply, this);
  }
  ~UcxFakeConsumer() { die(); }

  /// Dies now (the destructor does the same).
  void kill() { die(); }

  /// Pulls `request_id` from the producer on 127.0.0.1:`port` with the layout `fingerprint` and
  /// progresses until the reply has arrived; returns the reply's status (ReplyStatus).
  uint32_t pull_and_await_reply(int port, uint64_t fingerprint, const std::string& request_id) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&a);
    p.sockaddr.addrlen = sizeof a;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = [](void*, ucp_ep_h, ucs_status_t) {};
    EXPECT_EQ(ucp_ep_create(ucx_->worker(), &p, &ep_), UCS_OK);
    PullHeader pull;
    pull.fingerprint = fingerprint;
    pull.id_len = static_cast<uint32_t>(request_id.size());
    message_.resize(sizeof pull + request_id.size());
    std::memcpy(message_.data(), &pull, sizeof pull);
    std::memcpy(message_.data() + sizeof pull, request_id.data(), request_id.size());
    header_.pull_id = 1;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
    ucx_call(
        rp,
        [&](const ucp_request_param_t& r) {
          return ucp_am_send_nbx(ep_, kUcxAmPull, &header_, sizeof header_, message_.data(),
                                 message_.size(), &r);
        },
        [](ucs_status_t s) { EXPECT_EQ(s, UCS_OK); });
    ucx_->drain([this] { return replied_; }, /*max_rounds=*/1 << 30);
    return status_;
  }

 private:
  static ucs_status_t on_reply(void* arg, const void* header, size_t header_length, void* data,
                               size_t length, const ucp_am_recv_param_t*) {
    auto* self = static_cast<UcxFakeConsumer*>(arg);
    EXPECT_EQ(header_length, sizeof(UcxAmHeader));
    ReplyHeader reply;
    EXPECT_GE(length, sizeof reply);
    if (length >= sizeof reply) {
      std::memcpy(&reply, data, sizeof reply);
      self->status_ = reply.status;
    }
    (void)header;
    self->replied_ = true;
    return UCS_OK;
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
      ep_ = nullptr;
    }
    ucx_.reset();
  }

  std::unique_ptr<UcxWorker> ucx_;
  ucp_ep_h ep_ = nullptr;
  UcxAmHeader header_;
  std::vector<std::byte> message_;
  bool replied_ = false;
  uint32_t status_ = ~0u;
};

}  // namespace pagoda::kv_transfer::testing
