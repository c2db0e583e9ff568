// Bi-directional KV between two kv_both engines in this process (stories260K on the CPU, the
// transfer on loopback with ephemeral ports), over TCP and UCX (its tcp transport):
//  - a two-turn conversation: turn 1 prefilled on the producer and decoded on the consumer with
//    return_kv; the producer imports the finished turn; turn 2's prefill on the producer finds
//    turn 1's full blocks, generated tokens included, as prefix-cache hits (the imported ones
//    counted apart), and both turns' outputs are bit-identical to one engine's (both executors);
//  - faults cost only a recompute: the consumer's blocks freed by its keep timeout, and the
//    consumer gone, before the import;
//  - the roles and fields are checked.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "core/status.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using engine_test::greedy;
using engine_test::KVTransport;
using engine_test::prompt_of;
using engine_test::small_engine;

constexpr int kGenerated = 30;

class PDBidirectional : public ::testing::TestWithParam<KVTransport> {
 protected:
  EngineArgs engine(const std::string& backend = "uni", int keep_timeout_ms = 120000) const {
    EngineArgs args = small_engine();
    args.distributed_executor_backend = backend;
    KVTransferConfig c;
    c.kv_role = "kv_both";
    c.transport = GetParam().name;
    c.ucx_tls = GetParam().ucx_tls;
    c.keep_timeout_ms = keep_timeout_ms;
    args.kv_transfer_config = c;
    return args;
  }
};

struct Result {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
  std::optional<KVTransferParams> params;
};

Result drain(OutputStream& stream) {
  Result r;
  while (std::optional<RequestOutput> o = stream.next()) {
    r.tokens.insert(r.tokens.end(), o->token_ids.begin(), o->token_ids.end());
    r.logprobs.insert(r.logprobs.end(), o->logprobs.begin(), o->logprobs.end());
    if (o->kv_transfer_params) r.params = o->kv_transfer_params;
    EXPECT_TRUE(o->error.empty()) << o->error;
  }
  return r;
}

Result run(EngineCore& e, const std::vector<int32_t>& prompt, bool remote_decode = false,
           const std::optional<KVTransferParams>& remote = std::nullopt, bool return_kv = false) {
  EngineRequest r;
  r.prompt_token_ids = prompt;
  r.params = greedy(kGenerated, 3);
  r.do_remote_decode = remote_decode;
  if (remote) {
    r.do_remote_prefill = true;
    r.remote = *remote;
  }
  r.return_kv = return_kv;
  return drain(*e.submit(std::move(r)));
}

KVImportResult import(EngineCore& e, const KVTransferParams& params) {
  std::promise<KVImportResult> done;
  e.import_kv(params, "", [&](KVImportResult r) { done.set_value(std::move(r)); });
  return done.get_future().get();
}

void expect_bitwise(const Result& a, const Result& b) {
  ASSERT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t t = 0; t < a.logprobs.size(); ++t) {
    EXPECT_EQ(a.logprobs[t].logprob, b.logprobs[t].logprob) << "token " << t;
    EXPECT_EQ(a.logprobs[t].top, b.logprobs[t].top) << "token " << t;
  }
}

/// One conversation turn through producer and consumer: the consumer's answer, with its
/// return_kv hand-off.
Result turn(EngineCore& producer, EngineCore& consumer, const std::vector<int32_t>& prompt) {
  const Result prefill = run(producer, prompt, /*remote_decode=*/true);
  EXPECT_TRUE(prefill.params.has_value());
  return run(consumer, prompt, false, prefill.params, /*return_kv=*/true);
}

/// Turn 2's prompt: turn 1's prompt, its answer, and 10 new tokens.
std::vector<int32_t> next_prompt(const std::vector<int32_t>& prompt, const Result& answer) {
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), answer.tokens.begin(), answer.tokens.end());
  const std::vector<int32_t> more = prompt_of(11, 99);
  next.insert(next.end(), more.begin() + 1, more.end());
  return next;
}

TEST_P(PDBidirectional, TheNextTurnsPrefillHitsTheFinishedTurnsBlocks) {
  EngineCore reference(small_engine());
  const std::vector<int32_t> p1 = prompt_of(40, 1);
  const Result want1 = run(reference, p1);
  const std::vector<int32_t> p2 = next_prompt(p1, want1);  // 40 + 30 + 10 = 80 tokens
  const Result want2 = run(reference, p2);
  for (const char* backend : {"uni", "mp"}) {
    SCOPED_TRACE(backend);
    EngineCore producer(engine(backend));
    EngineCore consumer(engine(backend));
    const Result got1 = turn(producer, consumer, p1);
    expect_bitwise(want1, got1);
    // 40 + 30 tokens, the last one's KV never computed: (70 - 1) / 16 = 4 full blocks kept,
    // blocks 2-3 holding generated tokens.
    ASSERT_TRUE(got1.params.has_value());
    EXPECT_EQ(got1.params->remote_block_ids.size(), 4u);
    EXPECT_EQ(got1.params->remote_port, consumer.kv_transfer_port());
    EXPECT_EQ(consumer.stats().kv_transfer_returned_blocks, 4);

    // The producer has turn 1's prompt blocks 0-1 cached already; it imports blocks 2-3.
    const KVImportResult imported = import(producer, *got1.params);
    EXPECT_TRUE(imported.error.empty()) << imported.error;
    EXPECT_EQ(imported.num_blocks, 4);
    EXPECT_EQ(imported.cached_blocks, 2);
    EXPECT_EQ(imported.imported_blocks, 2);
    const EngineStats before = producer.stats();
    EXPECT_EQ(before.kv_transfer_imported_blocks, 2);

    // Turn 2: the producer's prefill computes only tokens 64-79.
    const Result prefill2 = run(producer, p2, /*remote_decode=*/true);
    const EngineStats after = producer.stats();
    EXPECT_EQ(after.prefix_cache_hits_tokens - before.prefix_cache_hits_tokens, 64);
    EXPECT_EQ(after.prefix_cache_imported_hits_tokens - before.prefix_cache_imported_hits_tokens,
              32);
    EXPECT_EQ(after.prompt_tokens - before.prompt_tokens, 80 - 64);
    ASSERT_TRUE(prefill2.params.has_value());
    const Result got2 = run(consumer, p2, false, prefill2.params, /*return_kv=*/true);
    expect_bitwise(want2, got2);
    EXPECT_EQ(producer.stats().kv_cache_usage, 0.0);
    EXPECT_EQ(consumer.stats().kv_cache_usage, 0.0);
  }
}

TEST_P(PDBidirectional, WithoutTheImportTheNextTurnRecomputesTheGeneratedTokens) {
  EngineCore reference(small_engine());
  const std::vector<int32_t> p1 = prompt_of(40, 2);
  const Result want1 = run(reference, p1);
  const std::vector<int32_t> p2 = next_prompt(p1, want1);
  EngineCore producer(engine());
  EngineCore consumer(engine());
  expect_bitwise(want1, turn(producer, consumer, p1));
  const EngineStats before = producer.stats();
  const Result prefill2 = run(producer, p2, /*remote_decode=*/true);
  const EngineStats after = producer.stats();
  EXPECT_EQ(after.prefix_cache_hits_tokens - before.prefix_cache_hits_tokens, 32);  // prompt only
  EXPECT_EQ(after.prefix_cache_imported_hits_tokens, 0);
  EXPECT_EQ(after.prompt_tokens - before.prompt_tokens, 80 - 32);
  expect_bitwise(run(reference, p2), run(consumer, p2, false, prefill2.params));
}

// The faults: the import fails (counted), nothing is cached, and turn 2 is prefilled in full on
// the producer with the same answer.
void expect_recompute(EngineCore& producer, EngineCore& reference, EngineCore& consumer,
                      const std::vector<int32_t>& p2) {
  const EngineStats before = producer.stats();
  const Result prefill2 = run(producer, p2, /*remote_decode=*/true);
  const EngineStats after = producer.stats();
  EXPECT_EQ(after.prefix_cache_imported_hits_tokens, 0);
  EXPECT_EQ(after.prompt_tokens - before.prompt_tokens, 80 - 32);
  expect_bitwise(run(reference, p2), run(consumer, p2, false, prefill2.params));
  EXPECT_EQ(producer.stats().kv_cache_usage, 0.0);
}

TEST_P(PDBidirectional, TheConsumersBlocksExpiredBeforeTheImport) {
  EngineCore reference(small_engine());
  const std::vector<int32_t> p1 = prompt_of(40, 3);
  const Result want1 = run(reference, p1);
  EngineCore producer(engine());
  EngineCore consumer(engine("uni", /*keep_timeout_ms=*/20));
  const Result got1 = turn(producer, consumer, p1);
  expect_bitwise(want1, got1);
  ASSERT_TRUE(got1.params.has_value());
  // The transfer server frees expired entries every few milliseconds: wait for it.
  while (consumer.stats().kv_transfer_blocks_freed_timeout < 4)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const KVImportResult imported = import(producer, *got1.params);
  EXPECT_FALSE(imported.error.empty());
  EXPECT_EQ(imported.imported_blocks, 0);
  EXPECT_EQ(producer.stats().kv_transfer_import_failures, 1);
  EXPECT_EQ(producer.stats().kv_transfer_imported_blocks, 0);
  expect_recompute(producer, reference, consumer, next_prompt(p1, want1));
}

TEST_P(PDBidirectional, TheConsumerDiedBeforeTheImport) {
  EngineCore reference(small_engine());
  const std::vector<int32_t> p1 = prompt_of(40, 4);
  const Result want1 = run(reference, p1);
  EngineCore producer(engine());
  KVTransferParams returned;
  {
    EngineCore consumer(engine());
    const Result got1 = turn(producer, consumer, p1);
    expect_bitwise(want1, got1);
    ASSERT_TRUE(got1.params.has_value());
    returned = *got1.params;
  }  // the consumer shuts down: its transfer port refuses connections
  const KVImportResult imported = import(producer, returned);
  EXPECT_FALSE(imported.error.empty());
  EXPECT_EQ(producer.stats().kv_transfer_import_failures, 1);
  EngineCore consumer(engine());
  expect_recompute(producer, reference, consumer, next_prompt(p1, want1));
}

TEST_P(PDBidirectional, RolesAndFieldsAreChecked) {
  EngineArgs producer_only = engine();
  producer_only.kv_transfer_config->kv_role = "kv_producer";
  EngineArgs consumer_only = engine();
  consumer_only.kv_transfer_config->kv_role = "kv_consumer";
  EngineCore producer(producer_only);
  EngineCore consumer(consumer_only);
  KVTransferParams p;
  p.remote_host = "127.0.0.1";
  p.remote_port = 1;
  p.remote_request_id = "x";
  // Importing pulls: a kv_producer cannot.
  EXPECT_THROW(producer.import_kv(p, "", [](KVImportResult) {}), InvalidArgument);
  p.remote_request_id.clear();
  EXPECT_THROW(consumer.import_kv(p, "", [](KVImportResult) {}), InvalidArgument);
  // Keeping a turn's KV serves it: a kv_consumer cannot.
  EngineRequest r;
  r.prompt_token_ids = prompt_of(20, 5);
  r.params = greedy(4);
  r.return_kv = true;
  EXPECT_THROW((void)consumer.submit(r), InvalidArgument);
  r.params.n = 2;
  EXPECT_THROW((void)producer.submit(r), InvalidArgument);
  EngineArgs no_cache = engine();
  no_cache.enable_prefix_caching = false;
  EngineCore uncached(no_cache);
  p.remote_request_id = "x";
  EXPECT_THROW(uncached.import_kv(p, "", [](KVImportResult) {}), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Transports, PDBidirectional, engine_test::kv_transports(),
                         engine_test::kv_transport_name);

}  // namespace
}  // namespace pagoda
