// The TCP transport on loopback (ephemeral ports): a pull delivers the blocks with their checks;
// refusals (unknown id, another layout, a block shape the consumer does not take, more blocks
// than announced) and a closed port end the pull with an error; many pulls at once each get
// their own blocks.
#include <gtest/gtest.h>

#include <future>

#include "kv_transfer/tcp_transport.h"

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

TEST(TcpKVTransport, APullDeliversTheBlocksOnce) {
  KVExportStore store(std::chrono::milliseconds(60000));
  auto server = make_tcp_kv_server(store, "127.0.0.1", 0);
  ASSERT_GT(server->port(), 0);
  const auto sent = blocks(3, 100);
  store.put("r1", sent);
  auto puller = make_tcp_kv_puller();
  const PullResult r = pull(*puller, request(server->port(), "r1"));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.kv->token_ids, sent->token_ids);
  EXPECT_EQ(r.kv->bytes, sent->bytes);
  EXPECT_EQ(r.kv->checksums, sent->checksums);
  EXPECT_EQ(r.bytes_received, 40 + 3 * (16 + 8 + 64));
  // The server counts the blocks once the last byte is written, which may be after the pull ends.
  while (store.blocks_sent() < 3) std::this_thread::yield();
  EXPECT_EQ(store.num_pending_blocks(), 0);
  const PullResult again = pull(*puller, request(server->port(), "r1"));
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.error.find("unknown request"), std::string::npos) << again.error;
}

TEST(TcpKVTransport, RefusalsEndThePullWithAnError) {
  KVExportStore store(std::chrono::milliseconds(60000));
  auto server = make_tcp_kv_server(store, "127.0.0.1", 0);
  auto puller = make_tcp_kv_puller();
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

TEST(TcpKVTransport, ManyPullsAtOnce) {
  KVExportStore store(std::chrono::milliseconds(60000));
  auto server = make_tcp_kv_server(store, "127.0.0.1", 0);
  auto puller = make_tcp_kv_puller();
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

}  // namespace
}  // namespace pagoda::kv_transfer
