#include "kv/block_hash.h"

#include <array>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <xxhash.h>

namespace pagoda::kv {

std::string BlockHash::to_string() const { return fmt::format("{:016x}{:016x}", high, low); }

namespace {

// Appends raw bytes to a buffer that lives on the stack for ordinary block sizes.
class ByteWriter {
 public:
  explicit ByteWriter(size_t capacity) {
    if (capacity > inline_.size()) heap_.resize(capacity);
  }
  void write(const void* data, size_t size) {
    if (size == 0) return;  // data may be null for an empty span
    std::memcpy(base() + size_, data, size);
    size_ += size;
  }
  template <typename T>
  void write_value(const T& value) {
    write(&value, sizeof(value));
  }
  [[nodiscard]] const std::byte* data() const {
    return heap_.empty() ? inline_.data() : heap_.data();
  }
  [[nodiscard]] size_t size() const { return size_; }

 private:
  std::byte* base() { return heap_.empty() ? inline_.data() : heap_.data(); }

  std::array<std::byte, 512> inline_;
  std::vector<std::byte> heap_;
  size_t size_ = 0;
};

}  // namespace

BlockHash hash_block_tokens(const std::optional<BlockHash>& parent,
                            std::span<const TokenId> token_ids, std::string_view extra_keys) {
  // Layout: [has_parent u8][parent 16 B][num_tokens u64][tokens][extra size u64][extra bytes].
  const uint64_t num_tokens = token_ids.size();
  const uint64_t extra_size = extra_keys.size();
  ByteWriter writer(1 + sizeof(BlockHash) + 2 * sizeof(uint64_t) + token_ids.size_bytes() +
                    extra_keys.size());
  const uint8_t has_parent = parent.has_value() ? 1 : 0;
  const BlockHash parent_hash = parent.value_or(BlockHash{});
  writer.write_value(has_parent);
  writer.write_value(parent_hash.low);
  writer.write_value(parent_hash.high);
  writer.write_value(num_tokens);
  writer.write(token_ids.data(), token_ids.size_bytes());
  writer.write_value(extra_size);
  writer.write(extra_keys.data(), extra_keys.size());
  const XXH128_hash_t h = XXH3_128bits(writer.data(), writer.size());
  return BlockHash{h.low64, h.high64};
}

}  // namespace pagoda::kv
