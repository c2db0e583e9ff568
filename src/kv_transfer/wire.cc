#include "kv_transfer/wire.h"

namespace pagoda::kv_transfer {

const char* to_string(ReplyStatus status) {
  switch (status) {
    case ReplyStatus::kOk:
      return "ok";
    case ReplyStatus::kUnknownRequest:
      return "unknown request (never exported, already pulled, or freed by the keep timeout)";
    case ReplyStatus::kLayoutMismatch:
      return "KV layout mismatch (model, dtype, block size or KV spec differ)";
    case ReplyStatus::kBadRequest:
      return "malformed pull";
    case ReplyStatus::kProducerError:
      return "the producer could not expose the blocks";
  }
  return "unknown status";
}

}  // namespace pagoda::kv_transfer
