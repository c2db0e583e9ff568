#pragma once
// The pull protocol of the KV transfer port, byte for byte (little-endian, as every host pagoda
// builds for). One pull per connection:
//
//   consumer -> producer  PullHeader (24 bytes), then id_len bytes of the remote request id
//   producer -> consumer  ReplyHeader (40 bytes); when status is kOk, then
//                         token ids   int32  [num_blocks * block_size]
//                         checksums   uint64 [num_blocks]   (XXH3-64 of each block)
//                         blocks      bytes  [num_blocks, block_bytes]
//
// Example: 3 blocks of 16 tokens, 4096 bytes each: 40 + 192 + 24 + 12288 bytes back.
//
// The UCX transport (ucx_transport.h) sends the same headers as active messages, each with a
// UcxAmHeader naming the consumer's pull, and the consumer reads the blocks by RMA:
//
//   consumer -> producer  AM kUcxAmPull:  PullHeader, then the request id
//   producer -> consumer  AM kUcxAmReply: ReplyHeader; when status is kOk, then
//                         token ids   int32  [num_blocks * block_size]
//                         checksums   uint64 [num_blocks]
//                         UcxRegion   (24 bytes), then rkey_len bytes of the packed rkey
//   consumer              ucp_get of the blocks, [address, address + num_blocks * block_bytes)
//   consumer -> producer  AM kUcxAmDone: the get has ended; the producer unmaps the blocks
//
// Example: 3 blocks of 16 tokens, 4096 bytes each, a 90-byte rkey: a 40 + 192 + 24 + 24 + 90
// byte reply, then a 12288-byte get.
#include <cstdint>

namespace pagoda::kv_transfer {

inline constexpr uint32_t kPullMagic = 0x564B4750;   // "PGKV"
inline constexpr uint32_t kReplyMagic = 0x524B4750;  // "PGKR"
inline constexpr uint32_t kWireVersion = 1;
inline constexpr uint32_t kMaxRequestIdBytes = 4096;

struct PullHeader {
  uint32_t magic = kPullMagic;
  uint32_t version = kWireVersion;
  uint64_t fingerprint = 0;  // the consumer's layout_fingerprint
  uint32_t id_len = 0;       // bytes of the request id that follow
  uint32_t reserved = 0;
};
static_assert(sizeof(PullHeader) == 24);

/// Why a producer answers without blocks.
enum class ReplyStatus : uint32_t {
  kOk = 0,
  kUnknownRequest = 1,  // never exported, already pulled, or freed by the keep timeout
  kLayoutMismatch = 2,  // the fingerprints differ: the blocks would not mean the same
  kBadRequest = 3,      // a malformed pull
  kProducerError = 4,   // the producer could not expose the blocks (UCX: mapping them failed)
};

struct ReplyHeader {
  uint32_t magic = kReplyMagic;
  uint32_t status = 0;       // ReplyStatus
  uint64_t fingerprint = 0;  // the producer's layout_fingerprint
  uint32_t num_blocks = 0;
  uint32_t block_size = 0;
  uint64_t block_bytes = 0;
  uint64_t reserved = 0;
};
static_assert(sizeof(ReplyHeader) == 40);

inline constexpr unsigned kUcxAmPull = 1;
inline constexpr unsigned kUcxAmReply = 2;
inline constexpr unsigned kUcxAmDone = 3;

/// Every UCX active message's header: the consumer's id of the pull it belongs to.
struct UcxAmHeader {
  uint64_t pull_id = 0;
};

/// Where the producer's blocks are for the consumer's ucp_get.
struct UcxRegion {
  uint64_t address = 0;   // the blocks' address in the producer (0 when there are none)
  uint64_t length = 0;    // num_blocks * block_bytes
  uint32_t rkey_len = 0;  // bytes of the packed rkey that follow (0 when there are no blocks)
  uint32_t reserved = 0;
};
static_assert(sizeof(UcxRegion) == 24);

[[nodiscard]] const char* to_string(ReplyStatus status);

}  // namespace pagoda::kv_transfer
