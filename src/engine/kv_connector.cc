#include "engine/kv_connector.h"

#include <algorithm>

#include <filesystem>
#include "core/logging.h"
#include "core/status.h"

#include "engine/engine_core.h"
#include "kv/kv_cache_spec.h"
#include "kv_transfer/transport.h"
#include "model/config.h"

namespace pagoda {

namespace {

// What a producer and a consumer must share for a block's bytes to mean the same (hashed into
// the transfer's layout fingerprint): the model's identity and shape, the KV cache's dtype and
// layout, and the block size.
KVLayoutInfo kv_layout_info(const EngineArgs& args, const ModelConfig& config,
                            const kv::KVCacheSpec& spec) {
  namespace fs = std::filesystem;
  std::string name = fs::path(args.model).filename().string();
  if (name.empty()) name = fs::path(args.model).parent_path().filename().string();
  KVLayoutInfo info;
  info.block_size = args.block_size;
  info.block_bytes = spec.block_bytes(args.block_size);
  // The weights themselves by a sample (dummy weights by their seed): a fine-tune of the same
  // shape under the same directory name must not take the base model's KV.
  const std::string sample =
      args.load_format == "dummy"
          ? fmt::format("dummy:{}", args.seed)
          : fmt::format("{:016x}", kv_transfer::checkpoint_sample(args.model));
  info.description = fmt::format(
      "model={} sample={} arch={} vocab={} hidden={} layers={} kv_heads={} head_dim={} weights={} "
      "quantization={} kv_dtype={} kv_layout={} block_size={} block_bytes={}",
      name, sample, config.architecture, config.vocab_size, config.hidden_size, spec.num_layers,
      spec.num_kv_heads, spec.head_dim, args.dtype, args.quantization,
      kv::kv_cache_dtype_name(spec.dtype),
      spec.layout == kv::KVLayout::kTokenMajor ? "token_major" : "head_major", args.block_size,
      info.block_bytes);
  return info;
}

}  // namespace

KVConnector::KVConnector(const KVTransferConfig& config, KVLayoutInfo layout, Executor& executor,
                         kv::KVCacheManager& kv, std::function<void()> wake)
    : config_(config),
      layout_(std::move(layout)),
      fingerprint_(kv_transfer::layout_fingerprint(layout_.description)),
      executor_(executor),
      kv_(kv),
      wake_(std::move(wake)),
      latency_counts_(kKVTransferLatencyBuckets.size() + 1, 0) {
  // The command line checks these with the flag's key names; library callers get them here.
  if (config_.kv_connector != "PagodaConnector") {
    throw InvalidArgument(
        fmt::format("kv_connector '{}' must be PagodaConnector", config_.kv_connector));
  }
  if (!config_.producer() && !config_.consumer()) {
    throw InvalidArgument(
        fmt::format("kv_role '{}' must be kv_producer, kv_consumer or kv_both", config_.kv_role));
  }
  if (config_.transport != "tcp" && config_.transport != "ucx") {
    throw InvalidArgument(fmt::format("KV transport '{}' must be tcp or ucx", config_.transport));
  }
  if (!config_.ucx_tls.empty() && config_.transport != "ucx") {
    throw InvalidArgument(fmt::format("ucx_tls '{}' needs the ucx transport (transport is {})",
                                      config_.ucx_tls, config_.transport));
  }
  if (config_.port < 0 || config_.port > 65535 || config_.pull_timeout_ms < 1 ||
      config_.keep_timeout_ms < 1) {
    throw InvalidArgument(fmt::format(
        "KV transfer port {} (0..65535), pull timeout {} ms and keep timeout {} ms (> 0)",
        config_.port, config_.pull_timeout_ms, config_.keep_timeout_ms));
  }
  const kv_transfer::UcxOptions ucx{config_.ucx_tls};
  if (config_.producer()) {
    store_ = std::make_unique<kv_transfer::KVExportStore>(
        std::chrono::milliseconds(config_.keep_timeout_ms));
    server_ =
        kv_transfer::make_kv_server(config_.transport, *store_, config_.host, config_.port, ucx);
  }
  if (config_.consumer()) puller_ = kv_transfer::make_kv_puller(config_.transport, ucx);
  engine_id_ = !config_.engine_id.empty() ? config_.engine_id
                                          : fmt::format("pagoda-{}:{}", config_.host, port());
  spdlog::info("KV transfer ({}, {}, {}): {}{}; layout {:016x} ({})", config_.kv_connector,
               config_.kv_role, config_.transport, engine_id_,
               server_ ? fmt::format(", serving pulls on {}:{}", config_.host, port()) : "",
               fingerprint_, layout_.description);
}

KVConnector::~KVConnector() {
  // The transports' threads stop first: no callback runs into a half-destroyed connector.
  server_.reset();
  puller_.reset();
}

int KVConnector::port() const { return server_ ? server_->port() : 0; }

KVTransferParams KVConnector::export_prompt(const std::string& request_id,
                                            std::span<const int32_t> prompt,
                                            std::span<const kv::BlockId> block_table) {
  // The blocks a consumer can load: all full prompt blocks but one holding the last token.
  // Example (block_size 16): a 40-token prompt sends blocks 0-1 (tokens 0-31); a 33-token prompt
  // sends blocks 0-1 as well; a 32-token prompt sends block 0 (token 31 must be recomputed).
  const int64_t bs = layout_.block_size;
  const int64_t num_blocks =
      std::min<int64_t>(std::max<int64_t>(static_cast<int64_t>(prompt.size()) - 1, 0) / bs,
                        static_cast<int64_t>(block_table.size()));
  return export_blocks(request_id, prompt.first(static_cast<size_t>(num_blocks * bs)),
                       block_table.first(static_cast<size_t>(num_blocks)));
}

KVTransferParams KVConnector::export_blocks(const std::string& request_id,
                                            std::span<const int32_t> token_ids,
                                            std::span<const kv::BlockId> block_ids) {
  PAGODA_CHECK(store_ != nullptr, "exporting KV without the producer role");
  const auto num_blocks = static_cast<int64_t>(block_ids.size());
  PAGODA_CHECK(static_cast<int64_t>(token_ids.size()) == num_blocks * layout_.block_size,
               "{} tokens for {} blocks of {}", token_ids.size(), num_blocks, layout_.block_size);
  auto kv = std::make_shared<kv_transfer::ExportedKV>();
  kv->fingerprint = fingerprint_;
  kv->block_size = layout_.block_size;
  kv->block_bytes = layout_.block_bytes;
  kv->token_ids.assign(token_ids.begin(), token_ids.end());
  kv->bytes.resize(static_cast<size_t>(num_blocks * layout_.block_bytes));
  const std::vector<int32_t> ids(block_ids.begin(), block_ids.end());
  if (num_blocks > 0) executor_.save_kv_blocks(ids, kv->bytes);
  kv->compute_checksums();
  store_->put(request_id, kv);
  return hand_off(request_id, block_ids);
}

KVTransferParams KVConnector::hand_off(const std::string& request_id,
                                       std::span<const kv::BlockId> block_ids) const {
  KVTransferParams params;
  params.remote_engine_id = engine_id_;
  params.remote_host = config_.host;
  params.remote_port = port();
  params.remote_block_ids.assign(block_ids.begin(), block_ids.end());
  params.remote_request_id = request_id;
  return params;
}

void KVConnector::start_pull(kv::RequestId id, const KVTransferParams& remote) {
  PAGODA_CHECK(puller_ != nullptr, "start_pull without the consumer role");
  kv_transfer::PullRequest pull;
  pull.host = remote.remote_host;
  pull.port = remote.remote_port;
  pull.remote_request_id = remote.remote_request_id;
  pull.fingerprint = fingerprint_;
  pull.block_size = layout_.block_size;
  pull.block_bytes = layout_.block_bytes;
  pull.max_blocks = static_cast<int32_t>(remote.remote_block_ids.size());
  pull.timeout = std::chrono::milliseconds(config_.pull_timeout_ms);
  puller_->pull(pull, [this, id](kv_transfer::PullResult result) {
    {
      std::lock_guard lock(arrivals_mutex_);
      arrivals_.push_back({id, std::move(result)});
    }
    wake_();
  });
}

bool KVConnector::has_arrivals() const {
  std::lock_guard lock(arrivals_mutex_);
  return !arrivals_.empty();
}

std::vector<KVConnector::Arrival> KVConnector::take_arrivals() {
  std::lock_guard lock(arrivals_mutex_);
  std::vector<Arrival> out;
  out.swap(arrivals_);
  return out;
}

void KVConnector::record_pull(const kv_transfer::PullResult& r) {
  received_bytes_ += r.bytes_received;
  size_t bucket = 0;
  while (bucket < kKVTransferLatencyBuckets.size() && r.seconds > kKVTransferLatencyBuckets[bucket])
    ++bucket;
  ++latency_counts_[bucket];
  latency_sum_ += r.seconds;
}

int KVConnector::accept(Arrival& arrival, std::span<const int32_t> prompt, std::string& why) {
  kv_transfer::PullResult& r = arrival.result;
  record_pull(r);
  if (!r.ok()) {
    why = r.error;
    ++failures_;
    return 0;
  }
  // The blocks must hold this prompt's KV: the producer's tokens are a prefix of ours.
  const std::vector<int32_t>& tokens = r.kv->token_ids;
  if (tokens.size() > prompt.size() || !std::equal(tokens.begin(), tokens.end(), prompt.begin())) {
    why = "the received blocks hold another prompt's tokens";
    ++failures_;
    return 0;
  }
  const int num_blocks = r.kv->num_blocks();
  received_[arrival.id] = std::move(r.kv);
  return num_blocks;
}

std::shared_ptr<kv_transfer::ExportedKV> KVConnector::accept_import(Arrival& arrival,
                                                                    std::string& why) {
  kv_transfer::PullResult& r = arrival.result;
  record_pull(r);
  if (!r.ok()) {
    why = r.error;
    ++import_failures_;
    return nullptr;
  }
  // The transport checked the shape (block size and bytes, checksums); the token ids must fill
  // the blocks exactly, since they are what the blocks are hashed by.
  if (r.kv->token_ids.size() !=
      static_cast<size_t>(r.kv->num_blocks()) * static_cast<size_t>(layout_.block_size)) {
    why = fmt::format("{} token ids for {} blocks of {} tokens", r.kv->token_ids.size(),
                      r.kv->num_blocks(), layout_.block_size);
    ++import_failures_;
    return nullptr;
  }
  return std::move(r.kv);
}

void KVConnector::before_launch() {
  const std::vector<kv::ExternalKVLoad> loads = kv_.take_external_loads();
  if (loads.empty()) return;
  const auto block_bytes = static_cast<size_t>(layout_.block_bytes);
  staging_.resize(loads.size() * block_bytes);
  staging_ids_.clear();
  // Load i goes to [i * block_bytes, (i + 1) * block_bytes) of the staging buffer.
  for (size_t i = 0; i < loads.size(); ++i) {
    const auto it = received_.find(loads[i].request_id);
    PAGODA_CHECK(it != received_.end() && loads[i].index < it->second->num_blocks(),
                 "request {}: received block {} is not held", loads[i].request_id, loads[i].index);
    const std::span<const std::byte> bytes = it->second->block(loads[i].index);
    std::copy(bytes.begin(), bytes.end(),
              staging_.begin() + static_cast<ptrdiff_t>(i * block_bytes));
    staging_ids_.push_back(loads[i].block);
  }
  executor_.load_kv_blocks(staging_ids_, staging_);
  received_tokens_ += static_cast<int64_t>(loads.size()) * layout_.block_size;
  for (const kv::ExternalKVLoad& load : loads) received_.erase(load.request_id);
}

void KVConnector::fill_consumer_stats(EngineStats& stats) const {
  stats.kv_transfer_received_tokens = received_tokens_;
  stats.kv_transfer_received_bytes = received_bytes_;
  stats.kv_transfer_failures = failures_;
  stats.kv_transfer_latency_counts = latency_counts_;
  stats.kv_transfer_latency_sum = latency_sum_;
  stats.kv_transfer_returned_blocks = returned_blocks_;
  stats.kv_transfer_imported_blocks = imported_blocks_;
  stats.kv_transfer_import_failures = import_failures_;
}

void KVConnector::fill_producer_stats(EngineStats& stats) const {
  if (store_ == nullptr) return;
  stats.kv_transfer_blocks_sent = store_->blocks_sent();
  stats.kv_transfer_blocks_freed_timeout = store_->blocks_freed_by_timeout();
  stats.kv_transfer_pending_blocks = store_->num_pending_blocks();
}

std::unique_ptr<KVConnector> make_kv_connector(const EngineArgs& args, const ModelConfig& config,
                                               const ExecutorInfo& info, Executor& executor,
                                               kv::KVCacheManager& kv, std::function<void()> wake) {
  if (args.calculate_kv_scales) {
    throw InvalidArgument(
        "--kv-transfer-config with --calculate-kv-scales: each engine would compute its own k/v "
        "scales, so a producer's fp8/int8 codes would mean something else to a consumer");
  }
  if (args.decode_context_parallel_size > 1) {
    throw InvalidArgument(fmt::format(
        "--kv-transfer-config with --decode-context-parallel-size {}: KV transfers move whole "
        "blocks of one rank",
        args.decode_context_parallel_size));
  }
  if (info.draft_kv_spec) {
    throw InvalidArgument(
        "--kv-transfer-config with a draft model (speculative_config): the draft's KV is not "
        "transferred; use the ngram method");
  }
  return std::make_unique<KVConnector>(*args.kv_transfer_config,
                                       kv_layout_info(args, config, info.kv_spec), executor, kv,
                                       std::move(wake));
}

void check_kv_transfer_request(const KVConnector* connector, EngineRequest& r) {
  if (!r.do_remote_decode && !r.do_remote_prefill && !r.return_kv) return;
  if (r.do_remote_decode && r.do_remote_prefill) {
    throw InvalidArgument(
        "kv_transfer_params: do_remote_decode and do_remote_prefill exclude each other");
  }
  if (r.do_remote_decode && (connector == nullptr || !connector->config().producer())) {
    throw InvalidArgument(
        "kv_transfer_params: do_remote_decode needs an engine started with --kv-transfer-config "
        "kv_role kv_producer or kv_both");
  }
  if (r.do_remote_prefill && (connector == nullptr || !connector->config().consumer())) {
    throw InvalidArgument(
        "kv_transfer_params: do_remote_prefill needs an engine started with --kv-transfer-config "
        "kv_role kv_consumer or kv_both");
  }
  if (r.return_kv && (connector == nullptr || !connector->config().producer())) {
    throw InvalidArgument(
        "kv_transfer_params: return_kv needs an engine started with --kv-transfer-config kv_role "
        "kv_both (or kv_producer): its transfer port serves the finished turn's KV");
  }
  if (r.return_kv && r.do_remote_decode) {
    throw InvalidArgument(
        "kv_transfer_params: return_kv is for the engine that decodes; a do_remote_decode "
        "request's KV is handed off already");
  }
  if (r.params.use_beam_search || r.params.n > 1 || r.params.prompt_logprobs) {
    throw InvalidArgument(
        "kv_transfer_params: a disaggregated request cannot use beam search, n > 1 or "
        "prompt_logprobs");
  }
  // A producer's request is a prefill: it stops after its first token (vLLM's rule).
  if (r.do_remote_decode) r.params.max_tokens = 1;
}

}  // namespace pagoda
