#include "hub/checksum.h"

#include <openssl/evp.h>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::hub {
namespace {

bool all_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

EVP_MD_CTX* start(const EVP_MD* md) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr || EVP_DigestInit_ex(ctx, md, nullptr) != 1) {
    EVP_MD_CTX_free(ctx);
    throw Internal("OpenSSL: cannot start a digest");
  }
  return ctx;
}

}  // namespace

ContentHasher::ContentHasher(std::string_view etag, std::optional<uint64_t> size) {
  if (!all_hex(etag)) return;
  if (etag.size() == 64) {
    ctx_ = start(EVP_sha256());
  } else if (etag.size() == 40 && size) {
    ctx_ = start(EVP_sha1());
    const std::string prefix = fmt::format("blob {}", *size);
    update(prefix.c_str(), prefix.size() + 1);  // with its NUL
  }
}

ContentHasher::~ContentHasher() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void ContentHasher::update(const char* data, size_t n) {
  if (ctx_ != nullptr) EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n);
}

std::string ContentHasher::hex() {
  if (ctx_ == nullptr) return "";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &length);
  std::string out;
  for (unsigned int i = 0; i < length; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

std::string sha256_hex(std::string_view data) {
  ContentHasher h(std::string(64, '0'), std::nullopt);
  h.update(data.data(), data.size());
  return h.hex();
}

std::string git_blob_sha1_hex(std::string_view data) {
  ContentHasher h(std::string(40, '0'), data.size());
  h.update(data.data(), data.size());
  return h.hex();
}

}  // namespace pagoda::hub
