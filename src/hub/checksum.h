#pragma once
// The Hub names a file's content by its ETag: the SHA-256 of an LFS file (64 hex digits) or the
// git blob id of a regular one (SHA-1 over "blob <size>\0" + content, 40 hex digits). A download
// is checked against it before it enters the cache.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace pagoda::hub {

/// An incremental digest of a file's content, in the kind its ETag implies.
class ContentHasher {
 public:
  /// For an ETag of 64 hex digits SHA-256; of 40, the git blob id of `size` bytes (size known).
  /// Any other ETag cannot be checked: enabled() is then false and the calls do nothing.
  ContentHasher(std::string_view etag, std::optional<uint64_t> size);
  ~ContentHasher();
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;

  [[nodiscard]] bool enabled() const { return ctx_ != nullptr; }
  void update(const char* data, size_t n);
  /// The digest in lower-case hex.
  [[nodiscard]] std::string hex();

 private:
  void* ctx_ = nullptr;  // EVP_MD_CTX
};

/// SHA-256 of `data`, lower-case hex.
[[nodiscard]] std::string sha256_hex(std::string_view data);
/// The git blob id of `data`, lower-case hex.
[[nodiscard]] std::string git_blob_sha1_hex(std::string_view data);

}  // namespace pagoda::hub
