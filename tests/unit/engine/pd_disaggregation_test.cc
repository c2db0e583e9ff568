// Prefill/decode disaggregation between two engines in this process (stories260K on the CPU, the
// transfer on loopback with ephemeral ports), each test over both transports: TCP, and UCX over
// UCX's tcp transport:
//  - a producer prefills, a consumer pulls the prompt's full blocks and decodes: the output is
//    bit-identical to one engine's, the consumer computes only the tail the blocks do not cover,
//    and no block is left on either side (both executors);
//  - faults end in the same output by a local prefill, with no block left: the producer gone, a
//    producer that closes mid-transfer (UCX: after answering, before the blocks are read), one
//    that never answers (the pull timeout), a corrupted
//    block (checksum), a layout mismatch (block size), blocks freed by the keep timeout before
//    the pull, and blocks of another prompt;
//  - a request waiting for remote KV holds no blocks and blocks no one: others finish meanwhile,
//    and it can be aborted.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "../kv_transfer/ucx_fake_consumer.h"
#include "../kv_transfer/ucx_fake_producer.h"
#include "core/status.h"
#include "engine_test_util.h"
#include "kv_transfer/transport.h"
#include "kv_transfer/wire.h"

namespace pagoda {
namespace {

using engine_test::greedy;
using engine_test::KVTransport;
using engine_test::prompt_of;
using engine_test::small_engine;

/// Every test runs over each transport; pd_engine() and the helpers below use the current one.
class PDDisaggregation : public ::testing::TestWithParam<KVTransport> {};

const KVTransport& transport() { return PDDisaggregation::GetParam(); }
bool over_tcp() { return std::string(transport().name) == "tcp"; }

EngineArgs pd_engine(const std::string& role, int block_size = 16, int pull_timeout_ms = 30000,
                     int keep_timeout_ms = 120000) {
  EngineArgs args = small_engine();
  args.block_size = block_size;
  KVTransferConfig c;
  c.kv_role = role;
  c.transport = transport().name;
  c.ucx_tls = transport().ucx_tls;
  c.pull_timeout_ms = pull_timeout_ms;
  c.keep_timeout_ms = keep_timeout_ms;
  args.kv_transfer_config = c;
  return args;
}

/// Drains a stream into its completion and the hand-off of its final output.
struct Result {
  CompletionOutput output;
  std::optional<KVTransferParams> params;
};
Result drain(OutputStream& stream) {
  Result r;
  while (std::optional<RequestOutput> o = stream.next()) {
    r.output.token_ids.insert(r.output.token_ids.end(), o->token_ids.begin(), o->token_ids.end());
    r.output.logprobs.insert(r.output.logprobs.end(), o->logprobs.begin(), o->logprobs.end());
    if (o->kv_transfer_params) r.params = o->kv_transfer_params;
    if (o->finish_reason) r.output.finish_reason = *o->finish_reason;
    EXPECT_TRUE(o->error.empty()) << o->error;
  }
  return r;
}

Result run_plain(EngineCore& engine, const std::vector<int32_t>& prompt) {
  EngineRequest r;
  r.prompt_token_ids = prompt;
  r.params = greedy(12, 3);
  return drain(*engine.submit(std::move(r)));
}

Result run_producer(EngineCore& producer, const std::vector<int32_t>& prompt) {
  EngineRequest r;
  r.prompt_token_ids = prompt;
  r.params = greedy(12, 3);
  r.do_remote_decode = true;
  return drain(*producer.submit(std::move(r)));
}

Result run_consumer(EngineCore& consumer, const std::vector<int32_t>& prompt,
                    const KVTransferParams& params) {
  EngineRequest r;
  r.prompt_token_ids = prompt;
  r.params = greedy(12, 3);
  r.do_remote_prefill = true;
  r.remote = params;
  return drain(*consumer.submit(std::move(r)));
}

void expect_bitwise(const CompletionOutput& a, const CompletionOutput& b) {
  ASSERT_EQ(a.token_ids, b.token_ids);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t t = 0; t < a.logprobs.size(); ++t) {
    EXPECT_EQ(a.logprobs[t].logprob, b.logprobs[t].logprob) << "token " << t;
    EXPECT_EQ(a.logprobs[t].top, b.logprobs[t].top) << "token " << t;
  }
}

KVTransferParams params_at(int port, const std::string& id, int num_blocks) {
  KVTransferParams p;
  p.remote_engine_id = "test";
  p.remote_host = "127.0.0.1";
  p.remote_port = port;
  p.remote_request_id = id;
  p.remote_block_ids.resize(static_cast<size_t>(num_blocks));
  return p;
}

/// A listening socket on an ephemeral loopback port that the test drives by hand.
class RawServer {
 public:
  RawServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~RawServer() { ::close(fd_); }
  [[nodiscard]] int port() const { return port_; }
  /// Accepts one connection and, over TCP, reads the pull (header and id); a UCX consumer's
  /// connection request is left unanswered.
  int accept_pull() {
    if (!over_tcp()) return ::accept(fd_, nullptr, nullptr);
    const int c = ::accept(fd_, nullptr, nullptr);
    kv_transfer::PullHeader h;
    read_all(c, &h, sizeof(h));
    std::string id(h.id_len, '\0');
    read_all(c, id.data(), id.size());
    return c;
  }

 private:
  static void read_all(int fd, void* p, size_t n) {
    auto* b = static_cast<char*>(p);
    while (n > 0) {
      const ssize_t got = ::read(fd, b, n);
      if (got <= 0) return;
      b += got;
      n -= static_cast<size_t>(got);
    }
  }
  int fd_ = -1;
  int port_ = 0;
};

/// Pulls a producer's real export (as a consumer of its layout would), for the fault cases that
/// serve it altered.
std::shared_ptr<kv_transfer::ExportedKV> pull_real(EngineCore& producer,
                                                   const KVTransferParams& p) {
  auto puller = kv_transfer::make_kv_puller(transport().name, {transport().ucx_tls});
  kv_transfer::PullRequest req;
  req.host = p.remote_host;
  req.port = p.remote_port;
  req.remote_request_id = p.remote_request_id;
  req.fingerprint = producer.kv_transfer_fingerprint();
  req.block_size = 16;
  req.block_bytes = 20480;  // stories260K: 5 layers x 4 heads x 8 x (K, V) x fp32 x 16 tokens
  req.max_blocks = static_cast<int32_t>(p.remote_block_ids.size());
  std::promise<kv_transfer::PullResult> done;
  puller->pull(req, [&](kv_transfer::PullResult r) { done.set_value(std::move(r)); });
  kv_transfer::PullResult r = done.get_future().get();
  EXPECT_TRUE(r.ok()) << r.error;
  return r.kv;
}

TEST_P(PDDisaggregation, ConsumerDecodesFromTheProducersBlocksBitIdentically) {
  EngineCore reference(small_engine());
  const std::vector<int32_t> prompt = prompt_of(70, 1);
  const Result want = run_plain(reference, prompt);
  for (const char* backend : {"uni", "mp"}) {
    SCOPED_TRACE(backend);
    EngineArgs pa = pd_engine("kv_producer");
    EngineArgs ca = pd_engine("kv_consumer");
    pa.distributed_executor_backend = backend;
    ca.distributed_executor_backend = backend;
    EngineCore producer(pa);
    EngineCore consumer(ca);
    ASSERT_GT(producer.kv_transfer_port(), 0);
    EXPECT_EQ(consumer.kv_transfer_port(), 0);  // a consumer serves no pulls

    const Result prefill = run_producer(producer, prompt);
    ASSERT_TRUE(prefill.params.has_value());
    EXPECT_EQ(prefill.output.token_ids.size(), 1u);  // max_tokens 12 became 1
    EXPECT_EQ(prefill.output.token_ids[0], want.output.token_ids[0]);
    EXPECT_EQ(prefill.output.finish_reason, FinishReason::kLength);
    // (70 - 1) / 16 = 4 full blocks: tokens 0-63; the consumer computes tokens 64-69.
    EXPECT_EQ(prefill.params->remote_block_ids.size(), 4u);
    EXPECT_EQ(prefill.params->remote_port, producer.kv_transfer_port());
    EXPECT_EQ(producer.stats().kv_transfer_pending_blocks, 4);

    const Result got = run_consumer(consumer, prompt, *prefill.params);
    expect_bitwise(want.output, got.output);
    const EngineStats c = consumer.stats();
    EXPECT_EQ(c.kv_transfer_received_tokens, 64);
    EXPECT_EQ(c.prompt_tokens, 70 - 64);  // only the tail was computed
    EXPECT_EQ(c.kv_transfer_failures, 0);
    EXPECT_GT(c.kv_transfer_received_bytes, 4 * 20480);
    EXPECT_EQ(c.kv_cache_usage, 0.0);  // every block back in the pool
    // The server counts the blocks once their last byte is written (maybe after the pull ended).
    while (producer.stats().kv_transfer_blocks_sent < 4) std::this_thread::yield();
    const EngineStats p = producer.stats();
    EXPECT_EQ(p.kv_transfer_blocks_sent, 4);
    EXPECT_EQ(p.kv_transfer_pending_blocks, 0);  // pulled: freed
    EXPECT_EQ(p.kv_cache_usage, 0.0);

    // A second pull of the same hand-off finds nothing (each is served once): a local prefill.
    const Result again = run_consumer(consumer, prompt, *prefill.params);
    expect_bitwise(want.output, again.output);
    EXPECT_EQ(consumer.stats().kv_transfer_failures, 1);
  }
}

TEST_P(PDDisaggregation, APromptOfWholeBlocksRecomputesItsLastBlock) {
  EngineCore reference(small_engine());
  EngineCore producer(pd_engine("kv_producer"));
  EngineCore consumer(pd_engine("kv_consumer"));
  const std::vector<int32_t> prompt = prompt_of(48, 2);  // 3 full blocks: 2 sent
  const Result prefill = run_producer(producer, prompt);
  ASSERT_TRUE(prefill.params.has_value());
  EXPECT_EQ(prefill.params->remote_block_ids.size(), 2u);
  const Result got = run_consumer(consumer, prompt, *prefill.params);
  expect_bitwise(run_plain(reference, prompt).output, got.output);
  EXPECT_EQ(consumer.stats().kv_transfer_received_tokens, 32);
  EXPECT_EQ(consumer.stats().prompt_tokens, 16);
}

// Every fault: the consumer's answer equals one engine's, it computed the whole prompt, counted a
// failure, and holds no block afterwards.
class PDFaults : public PDDisaggregation {
 protected:
  void expect_fallback(EngineCore& consumer, const std::vector<int32_t>& prompt,
                       const KVTransferParams& params) {
    const EngineStats before = consumer.stats();
    const Result got = run_consumer(consumer, prompt, params);
    expect_bitwise(run_plain(reference_, prompt).output, got.output);
    const EngineStats after = consumer.stats();
    EXPECT_EQ(after.kv_transfer_failures - before.kv_transfer_failures, 1);
    EXPECT_EQ(after.kv_transfer_received_tokens, before.kv_transfer_received_tokens);
    EXPECT_EQ(after.prompt_tokens - before.prompt_tokens, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(after.kv_cache_usage, 0.0);
  }
  EngineCore reference_{small_engine()};
};

TEST_P(PDFaults, TheProducerIsGone) {
  const std::vector<int32_t> prompt = prompt_of(70, 3);
  KVTransferParams params;
  {
    EngineCore producer(pd_engine("kv_producer"));
    params = *run_producer(producer, prompt).params;
  }  // the producer shuts down: its port refuses connections
  EngineCore consumer(pd_engine("kv_consumer"));
  expect_fallback(consumer, prompt, params);
}

TEST_P(PDFaults, TheProducerDiesMidTransfer) {
  const std::vector<int32_t> prompt = prompt_of(70, 4);
  EngineCore producer(pd_engine("kv_producer"));
  const KVTransferParams real = *run_producer(producer, prompt).params;
  const std::shared_ptr<kv_transfer::ExportedKV> kv = pull_real(producer, real);
  if (!over_tcp()) {
    kv_transfer::testing::UcxFakeProducer fake(transport().ucx_tls);
    EngineCore consumer(pd_engine("kv_consumer"));
    EngineRequest r;
    r.prompt_token_ids = prompt;
    r.params = greedy(12, 3);
    r.do_remote_prefill = true;
    r.remote = params_at(fake.port(), "dies", kv->num_blocks());
    const EngineStats before = consumer.stats();
    std::shared_ptr<OutputStream> stream = consumer.submit(std::move(r));
    fake.await_pull();
    fake.answer_and_die(*kv);
    const Result got = drain(*stream);
    expect_bitwise(run_plain(reference_, prompt).output, got.output);
    const EngineStats after = consumer.stats();
    EXPECT_EQ(after.kv_transfer_failures - before.kv_transfer_failures, 1);
    EXPECT_EQ(after.prompt_tokens - before.prompt_tokens, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(after.kv_cache_usage, 0.0);
    return;
  }
  RawServer fake;
  std::thread server([&] {
    const int c = fake.accept_pull();
    kv_transfer::ReplyHeader h;
    h.fingerprint = kv->fingerprint;
    h.num_blocks = static_cast<uint32_t>(kv->num_blocks());
    h.block_size = 16;
    h.block_bytes = static_cast<uint64_t>(kv->block_bytes);
    (void)::write(c, &h, sizeof(h));
    (void)::write(c, kv->token_ids.data(), kv->token_ids.size() * sizeof(int32_t));
    (void)::write(c, kv->checksums.data(), kv->checksums.size() * sizeof(uint64_t));
    (void)::write(c, kv->bytes.data(), kv->bytes.size() / 2);  // half the blocks, then gone
    ::close(c);
  });
  EngineCore consumer(pd_engine("kv_consumer"));
  expect_fallback(consumer, prompt, params_at(fake.port(), "dies", kv->num_blocks()));
  server.join();
}

// A consumer that dies after the producer accepted its pull (it reads the reply and is gone before
// the blocks: over TCP it closes the connection, over UCX its endpoint and worker vanish without
// the done message): the producer survives, keeps no block of that export (a pull takes the entry
// once), and serves the next request's pull in full.
TEST_P(PDFaults, AConsumerThatDiesAfterThePullIsAcceptedLeaksNothing) {
  EngineCore producer(pd_engine("kv_producer"));
  const KVTransferParams first = *run_producer(producer, prompt_of(70, 13)).params;
  EXPECT_GT(producer.stats().kv_transfer_pending_blocks, 0);
  if (over_tcp()) {
    const int c = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(first.remote_port));
    ASSERT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    kv_transfer::PullHeader h;
    h.fingerprint = producer.kv_transfer_fingerprint();
    h.id_len = static_cast<uint32_t>(first.remote_request_id.size());
    ASSERT_EQ(::write(c, &h, sizeof(h)), static_cast<ssize_t>(sizeof(h)));
    ASSERT_EQ(::write(c, first.remote_request_id.data(), h.id_len), static_cast<ssize_t>(h.id_len));
    kv_transfer::ReplyHeader reply;
    size_t got = 0;
    while (got < sizeof(reply)) {
      const ssize_t n = ::read(c, reinterpret_cast<char*>(&reply) + got, sizeof(reply) - got);
      ASSERT_GT(n, 0) << "the producer closed before its reply";
      got += static_cast<size_t>(n);
    }
    EXPECT_EQ(reply.status, static_cast<uint32_t>(kv_transfer::ReplyStatus::kOk));
    ::close(c);  // gone before the token ids, checksums and blocks
  } else {
    kv_transfer::testing::UcxFakeConsumer fake(transport().ucx_tls);
    EXPECT_EQ(fake.pull_and_await_reply(first.remote_port, producer.kv_transfer_fingerprint(),
                                        first.remote_request_id),
              static_cast<uint32_t>(kv_transfer::ReplyStatus::kOk));
    fake.kill();  // gone before its get of the blocks and its done message
  }

  // The export was taken by the pull: nothing stays pending. (The wait ends as soon as the
  // producer has handled the pull; the bound only keeps a broken producer from hanging the test.)
  for (int i = 0; i < 6000 && producer.stats().kv_transfer_pending_blocks > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(producer.stats().kv_transfer_pending_blocks, 0);

  // The producer still serves: the next request's blocks arrive whole and decode bit-identically.
  const std::vector<int32_t> prompt = prompt_of(70, 14);
  const KVTransferParams second = *run_producer(producer, prompt).params;
  EngineCore consumer(pd_engine("kv_consumer"));
  const Result got_second = run_consumer(consumer, prompt, second);
  expect_bitwise(run_plain(reference_, prompt).output, got_second.output);
  EXPECT_EQ(consumer.stats().kv_transfer_failures, 0);
  EXPECT_GT(consumer.stats().kv_transfer_received_tokens, 0);
}

TEST_P(PDFaults, TheProducerNeverAnswersAndThePullTimesOut) {
  const std::vector<int32_t> prompt = prompt_of(70, 5);
  RawServer fake;
  std::atomic<int> held{-1};
  std::thread server([&] { held = fake.accept_pull(); });  // reads the pull, answers nothing
  EngineCore consumer(pd_engine("kv_consumer", 16, /*pull_timeout_ms=*/200));
  expect_fallback(consumer, prompt, params_at(fake.port(), "silent", 4));
  server.join();
  ::close(held);
}

TEST_P(PDFaults, ACorruptedBlockFailsItsChecksum) {
  const std::vector<int32_t> prompt = prompt_of(70, 6);
  EngineCore producer(pd_engine("kv_producer"));
  const KVTransferParams real = *run_producer(producer, prompt).params;
  auto kv = std::make_shared<kv_transfer::ExportedKV>(*pull_real(producer, real));
  kv->bytes[2 * 20480 + 100] ^= std::byte{0x01};  // one bit of block 2; checksums as sent
  kv_transfer::KVExportStore store(std::chrono::milliseconds(60000));
  store.put("corrupt", kv);
  auto server =
      kv_transfer::make_kv_server(transport().name, store, "127.0.0.1", 0, {transport().ucx_tls});
  EngineCore consumer(pd_engine("kv_consumer"));
  expect_fallback(consumer, prompt, params_at(server->port(), "corrupt", 4));
  // The bytes did arrive (the server counts them once written), and were refused.
  while (store.blocks_sent() < 4) std::this_thread::yield();
  EXPECT_EQ(store.num_pending_blocks(), 0);
}

TEST_P(PDFaults, ALayoutMismatchIsRefusedAndTheBlocksStay) {
  const std::vector<int32_t> prompt = prompt_of(70, 7);
  EngineCore producer(pd_engine("kv_producer", 16));
  EngineCore consumer(pd_engine("kv_consumer", 32));  // another block size: another layout
  EXPECT_NE(producer.kv_transfer_fingerprint(), consumer.kv_transfer_fingerprint());
  const KVTransferParams params = *run_producer(producer, prompt).params;
  expect_fallback(consumer, prompt, params);
  // The producer kept them for a consumer of its layout (or its keep timeout).
  EXPECT_EQ(producer.stats().kv_transfer_pending_blocks, 4);
  EXPECT_EQ(producer.stats().kv_transfer_blocks_sent, 0);
}

TEST_P(PDFaults, TheKeepTimeoutFreesUnpulledBlocks) {
  const std::vector<int32_t> prompt = prompt_of(70, 8);
  EngineCore producer(pd_engine("kv_producer", 16, 30000, /*keep_timeout_ms=*/20));
  const KVTransferParams params = *run_producer(producer, prompt).params;
  // The server frees expired entries every few milliseconds: wait for that to happen.
  while (producer.stats().kv_transfer_blocks_freed_timeout < 4) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(producer.stats().kv_transfer_pending_blocks, 0);
  EngineCore consumer(pd_engine("kv_consumer"));
  expect_fallback(consumer, prompt, params);
  EXPECT_EQ(producer.stats().kv_transfer_blocks_sent, 0);
}

TEST_P(PDFaults, BlocksOfAnotherPromptAreRefused) {
  EngineCore producer(pd_engine("kv_producer"));
  const KVTransferParams params = *run_producer(producer, prompt_of(70, 9)).params;
  EngineCore consumer(pd_engine("kv_consumer"));
  expect_fallback(consumer, prompt_of(70, 10), params);
}

TEST_P(PDDisaggregation, ARequestWaitingForRemoteKVBlocksNoOneAndCanBeAborted) {
  RawServer fake;
  std::atomic<int> held{-1};
  std::thread server([&] { held = fake.accept_pull(); });  // never answers
  EngineCore consumer(pd_engine("kv_consumer", 16, /*pull_timeout_ms=*/600000));
  EngineRequest waiting;
  waiting.request_id = "waits";
  waiting.prompt_token_ids = prompt_of(70, 11);
  waiting.params = greedy(4);
  waiting.do_remote_prefill = true;
  waiting.remote = params_at(fake.port(), "never", 4);
  std::shared_ptr<OutputStream> stream = consumer.submit(std::move(waiting));
  server.join();  // the pull is under way
  // Meanwhile another request runs to its end.
  EngineCore reference(small_engine());
  expect_bitwise(run_plain(reference, prompt_of(40, 12)).output,
                 run_plain(consumer, prompt_of(40, 12)).output);
  EXPECT_FALSE(stream->finished());
  EXPECT_EQ(consumer.stats().num_waiting, 1);
  consumer.abort("waits");
  const Result aborted = drain(*stream);
  EXPECT_EQ(aborted.output.finish_reason, FinishReason::kAbort);
  EXPECT_EQ(consumer.stats().kv_cache_usage, 0.0);
  ::close(held);
}

TEST_P(PDDisaggregation, RequestsMustMatchTheRole) {
  EngineCore plain(small_engine());
  EngineCore producer(pd_engine("kv_producer"));
  EngineRequest r;
  r.prompt_token_ids = prompt_of(20, 13);
  r.params = greedy(4);
  r.do_remote_decode = true;
  EXPECT_THROW((void)plain.submit(r), InvalidArgument);
  r.do_remote_decode = false;
  r.do_remote_prefill = true;
  r.remote = params_at(1, "x", 1);
  EXPECT_THROW((void)producer.submit(r), InvalidArgument);  // a producer is no consumer
  r.do_remote_prefill = false;
  r.do_remote_decode = true;
  r.params.n = 2;
  EXPECT_THROW((void)producer.submit(r), InvalidArgument);
  EngineArgs scales = pd_engine("kv_both");
  scales.kv_cache_dtype = "fp8";
  scales.calculate_kv_scales = true;
  EXPECT_THROW(EngineCore{scales}, InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Transports, PDDisaggregation, engine_test::kv_transports(),
                         engine_test::kv_transport_name);
INSTANTIATE_TEST_SUITE_P(Transports, PDFaults, engine_test::kv_transports(),
                         engine_test::kv_transport_name);

}  // namespace
}  // namespace pagoda
