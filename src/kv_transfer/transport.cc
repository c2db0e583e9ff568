#include "kv_transfer/transport.h"

#include "core/status.h"
#include "kv_transfer/tcp_transport.h"
#include "kv_transfer/ucx_transport.h"

namespace pagoda::kv_transfer {

std::unique_ptr<KVServer> make_kv_server(const std::string& transport, KVExportStore& store,
                                         const std::string& host, int port, const UcxOptions& ucx) {
  if (transport == "tcp") return make_tcp_kv_server(store, host, port);
  if (transport == "ucx") return make_ucx_kv_server(store, host, port, ucx);
  throw InvalidArgument(fmt::format("KV transport '{}' must be tcp or ucx", transport));
}

std::unique_ptr<KVPuller> make_kv_puller(const std::string& transport, const UcxOptions& ucx) {
  if (transport == "tcp") return make_tcp_kv_puller();
  if (transport == "ucx") return make_ucx_kv_puller(ucx);
  throw InvalidArgument(fmt::format("KV transport '{}' must be tcp or ucx", transport));
}

ReplyStatus reply_status(KVExportStore::TakeError error) {
  switch (error) {
    case KVExportStore::TakeError::kNone:
      return ReplyStatus::kOk;
    case KVExportStore::TakeError::kLayoutMismatch:
      return ReplyStatus::kLayoutMismatch;
    case KVExportStore::TakeError::kUnknown:
      break;
  }
  return ReplyStatus::kUnknownRequest;
}

std::string check_reply(const ReplyHeader& reply, const PullRequest& request) {
  if (reply.magic != kReplyMagic) return "the reply is not a KV transfer reply";
  const auto status = static_cast<ReplyStatus>(reply.status);
  if (status != ReplyStatus::kOk) {
    return fmt::format("the producer refused the pull: {}", to_string(status));
  }
  if (reply.fingerprint != request.fingerprint) {
    return "KV layout mismatch (model, dtype, block size or KV spec differ)";
  }
  if (static_cast<int64_t>(reply.block_size) != request.block_size ||
      static_cast<int64_t>(reply.block_bytes) != request.block_bytes) {
    return fmt::format("block of {} tokens / {} bytes, expected {} / {}", reply.block_size,
                       reply.block_bytes, request.block_size, request.block_bytes);
  }
  if (reply.num_blocks > static_cast<uint32_t>(request.max_blocks)) {
    return fmt::format("{} blocks, more than the {} announced", reply.num_blocks,
                       request.max_blocks);
  }
  return "";
}

std::shared_ptr<ExportedKV> shape_of(const ReplyHeader& reply) {
  auto kv = std::make_shared<ExportedKV>();
  kv->fingerprint = reply.fingerprint;
  kv->block_size = static_cast<int32_t>(reply.block_size);
  kv->block_bytes = static_cast<int64_t>(reply.block_bytes);
  const size_t n = reply.num_blocks;
  kv->token_ids.resize(n * reply.block_size);
  kv->checksums.resize(n);
  kv->bytes.resize(n * reply.block_bytes);
  return kv;
}

std::string check_blocks(const ExportedKV& kv) {
  for (int32_t i = 0; i < kv.num_blocks(); ++i) {
    if (block_checksum(kv.block(i)) != kv.checksums[i]) {
      return fmt::format("block {} failed its checksum", i);
    }
  }
  return "";
}

}  // namespace pagoda::kv_transfer
