// Both transports, TCP and UCX (over UCX's tcp transport, the one every machine has), on loopback
// with ephemeral ports: a pull delivers the blocks with their checks; refusals (unknown id,
// another layout, a block shape the consumer does not take, more blocks than announced), a
// closed port, a corrupted block and a producer that never answers end the pull with an error;
// many pulls at once each get their own blocks.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "core/status.h"
#include "kv_transfer/transport.h"
#include "ucx_fake_producer.h"

namespace pagoda::kv_transfer {
namespace {

std::shared_ptr<ExportedKV> blocks(int n, int32_t first_token) {
  auto kv = std::make_shared<ExportedKV>();
  kv->fingerprint = 42;
  kv->block_size = 4;
  kv->block_bytes = 64;
  for (int i = 0; i < n * 4; ++i) kv->token_ids.push_back(first_token + i);
  kv->bytes.resize(static_cast<size_t>(n * 64));
  for (size_t i = 0; i < kv->bytes.size(); ++i) kv->bytes[i] = static_cast<std::byte>(i * 7);
  kv->compute_checksums();
  return kv;
}

PullRequest request(int port, const std::string& id) {
  PullRequest r;
  r.host = "127.0.0.1";
  r.port = port;
  r.remote_request_id = id;
  r.fingerprint = 42;
  r.block_size = 4;
  r.block_bytes = 64;
  r.max_blocks = 8;
  return r;
}

PullResult pull(KVPuller& puller, const PullRequest& r) {
  std::promise<PullResult> done;
  puller.pull(r, [&](PullResult result) { done.set_value(std::move(result)); });
  return done.get_future().get();
}

/// A transport by name, with the UCX transports to use when it is "ucx".
struct Transport {
  const char* name;
  const char* ucx_tls;
};

class KVTransport : public ::testing::TestWithParam<Transport> {
 protected:
  static UcxOptions ucx() { return UcxOptions{GetParam().ucx_tls}; }
  static std::unique_ptr<KVServer> new_server(KVExportStore& store) {
    return make_kv_server(GetParam().name, store, "127.0.0.1", 0, ucx());
  }
  static std::unique_ptr<KVPuller> new_puller() { return make_kv_puller(GetParam().name, ucx()); }
  static bool tcp() { return std::string(GetParam().name) == "tcp"; }
};

INSTANTIATE_TEST_SUITE_P(Transports, KVTransport,
                         ::testing::Values(Transport{"tcp", ""}, Transport{"ucx", "tcp"},
                                           Transport{"ucx", "sm,self,tcp"}),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           if (*info.param.ucx_tls != '\0') name += '_';
                           for (const char c : std::string(info.param.ucx_tls))
                             name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST_P(KVTransport, APullDeliversTheBlocksOnce) {
  KVExportStore store(std::chrono::milliseconds(60000));
  auto server = new_server(store);
  ASSERT_GT(server->port(), 0);
  const auto sent = blocks(3, 100);
  store.put("r1", sent);
  auto puller = new_puller();
  const PullResult r = pull(*puller, request(server->port(), "r1"));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.kv->token_ids, sent->token_ids);
  EXPECT_EQ(r.kv->bytes, sent->bytes);
  EXPECT_EQ(r.kv->checksums, sent->checksums);
  // TCP: the reply header, token ids, checksums and blocks; UCX adds the region and its rkey.
  if (tcp()) {
    EXPECT_EQ(r.bytes_received, 40 + 3 * (16 + 8 + 64));
  } else {
    EXPECT_GT(r.bytes_received, 40 + 3 * (16 + 8 + 64) + 24);
  }
  // The server counts the blocks once the last byte is written, which may be after the pull ends.
  while (store.blocks_sent() < 3) std::this_thread::yield();
  EXPECT_EQ(store.num_pending_blocks(), 0);
  const PullResult again = pull(*puller, request(server->port(), "r1"));
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.error.find("unknown request"), std::string::npos) << again.error;
}

TEST_P(KVTransport, RefusalsEndThePullWithAnError) {
  KVExportStore store(std::chrono::milliseconds(60000));
  auto server = new_server(store);
  auto puller = new_puller();
  store.put("r", blocks(3, 0));
  PullRequest r = request(server->port(), "r");
  r.fingerprint = 43;
  PullResult got = pull(*puller, r);
  EXPECT_NE(got.error.find("KV layout mismatch"), std::string::npos) << got.error;
  r = request(server->port(), "r");
  r.block_bytes = 32;
  got = pull(*puller, r);
  EXPECT_NE(got.error.find("block of 4 tokens / 64 bytes, expected 4 / 32"), std::string::npos)
      << got.error;
  store.put("r", blocks(3, 0));
  r = request(server->port(), "r");
  r.max_blocks = 2;
  got = pull(*puller, r);
  EXPECT_NE(got.error.find("3 blocks, more than the 2 announced"), std::string::npos) << got.error;
  const int closed_port = server->port();
  server.reset();  // nothing listens there now
  got = pull(*puller, request(closed_port, "r"));
  EXPECT_NE(got.error.find("cannot connect to the producer"), std::string::npos) << got.error;
}

TEST_P(KVTransport, ManyPullsAtOnce) {
  KVExportStore store(std::chrono::milliseconds(60000));
  auto server = new_server(store);
  auto puller = new_puller();
  constexpr int kPulls = 16;
  std::vector<std::promise<PullResult>> done(kPulls);
  for (int i = 0; i < kPulls; ++i) store.put("r" + std::to_string(i), blocks(1 + i % 4, i * 1000));
  for (int i = 0; i < kPulls; ++i) {
    puller->pull(request(server->port(), "r" + std::to_string(i)),
                 [&done, i](PullResult r) { done[i].set_value(std::move(r)); });
  }
  for (int i = 0; i < kPulls; ++i) {
    const PullResult r = done[i].get_future().get();
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.kv->num_blocks(), 1 + i % 4);
    EXPECT_EQ(r.kv->token_ids.front(), i * 1000);
  }
}

TEST_P(KVTransport, ACorruptedBlockFailsItsChecksum) {
  KVExportStore store(std::chrono::milliseconds(60000));
  auto server = new_server(store);
  auto kv = blocks(3, 0);
  kv->bytes[2 * 64 + 5] ^= std::byte{0x10};  // block 2; the checksums are the original ones
  store.put("r", kv);
  const PullResult got = pull(*new_puller(), request(server->port(), "r"));
  EXPECT_FALSE(got.ok());
  EXPECT_NE(got.error.find("block 2 failed its checksum"), std::string::npos) << got.error;
  // The blocks were delivered (and refused): the producer counts them sent, holding nothing.
  while (store.blocks_sent() < 3) std::this_thread::yield();
  EXPECT_EQ(store.num_pending_blocks(), 0);
}

TEST_P(KVTransport, APullOfAProducerThatNeverAnswersTimesOut) {
  // A port that accepts connections and never writes: the pull ends at its timeout.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  PullRequest r = request(ntohs(a.sin_port), "r");
  r.timeout = std::chrono::milliseconds(100);
  const PullResult got = pull(*new_puller(), r);
  EXPECT_FALSE(got.ok());
  EXPECT_NE(got.error.find("timed out after 100 ms"), std::string::npos) << got.error;
  ::close(fd);
}

TEST(UcxKVTransport, AProducerThatDiesBeforeItsBlocksAreReadFailsThePull) {
  testing::UcxFakeProducer fake("tcp");
  auto puller = make_kv_puller("ucx", {"tcp"});
  std::promise<PullResult> done;
  puller->pull(request(fake.port(), "r"), [&](PullResult r) { done.set_value(std::move(r)); });
  fake.await_pull();
  fake.answer_and_die(*blocks(3, 0));
  const PullResult got = done.get_future().get();
  EXPECT_FALSE(got.ok());
  // Usually "reading the blocks (the producer closed or died)"; when the connection's reset
  // overtakes the answer, "... or it closed before answering". Never a timeout.
  EXPECT_NE(got.error.find("closed"), std::string::npos) << got.error;
  EXPECT_EQ(got.error.find("timed out"), std::string::npos) << got.error;
}

TEST(KVTransportChoice, UnknownTransportsAreRefusedByName) {
  KVExportStore store(std::chrono::milliseconds(1000));
  try {
    (void)make_kv_puller("rdma", {});
    FAIL() << "an unknown transport was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'rdma' must be tcp or ucx"), std::string::npos);
  }
  EXPECT_THROW((void)make_kv_server("ucx", store, "not-an-ip", 0, {"tcp"}), InvalidArgument);
  try {
    (void)make_kv_puller("ucx", {"nonexistent"});
    FAIL() << "UCX started with a transport that does not exist";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("(ucx_tls) 'nonexistent'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagoda::kv_transfer
