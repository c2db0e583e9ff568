#include "kv_transfer/export_store.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace pagoda::kv_transfer {

uint64_t block_checksum(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

uint64_t layout_fingerprint(std::string_view description) {
  return XXH3_64bits(description.data(), description.size());
}

uint64_t checkpoint_sample(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors")
      files.push_back(entry.path());
  }
  if (files.empty()) return 0;
  std::sort(files.begin(), files.end());
  constexpr std::streamoff kSpan = 1 << 20;
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buffer;
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    const auto size = static_cast<std::streamoff>(fs::file_size(f, ec));
    XXH3_64bits_update(state, name.data(), name.size());
    XXH3_64bits_update(state, &size, sizeof size);
    std::ifstream in(f, std::ios::binary);
    // Example: a 5 MiB file contributes bytes [0, 1 MiB) and [4 MiB, 5 MiB); a 1.5 MiB one
    // [0, 1 MiB) and [0.5 MiB, 1.5 MiB).
    for (const std::streamoff at : {std::streamoff{0}, std::max<std::streamoff>(0, size - kSpan)}) {
      buffer.resize(static_cast<size_t>(std::min(kSpan, size)));
      in.seekg(at);
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      XXH3_64bits_update(state, buffer.data(), static_cast<size_t>(in.gcount()));
    }
  }
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

void ExportedKV::compute_checksums() {
  const int64_t n = block_bytes == 0 ? 0 : static_cast<int64_t>(bytes.size()) / block_bytes;
  checksums.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) checksums[i] = block_checksum(block(i));
}

void KVExportStore::put(const std::string& request_id, std::shared_ptr<const ExportedKV> kv,
                        Clock::time_point now) {
  std::lock_guard lock(mutex_);
  const int64_t blocks = kv->num_blocks();
  auto [it, inserted] = entries_.try_emplace(request_id);
  if (!inserted) {
    pending_blocks_ -= it->second.kv->num_blocks();
    blocks_freed_by_timeout_ += it->second.kv->num_blocks();
  }
  it->second = Entry{std::move(kv), now + keep_timeout_};
  pending_blocks_ += blocks;
}

std::shared_ptr<const ExportedKV> KVExportStore::take(const std::string& request_id,
                                                      uint64_t fingerprint, TakeError& error,
                                                      Clock::time_point now) {
  std::lock_guard lock(mutex_);
  error = TakeError::kUnknown;
  const auto it = entries_.find(request_id);
  if (it == entries_.end()) return nullptr;
  const bool expired = now >= it->second.deadline;
  if (!expired && it->second.kv->fingerprint != fingerprint) {
    error = TakeError::kLayoutMismatch;
    return nullptr;
  }
  std::shared_ptr<const ExportedKV> kv = std::move(it->second.kv);
  entries_.erase(it);
  pending_blocks_ -= kv->num_blocks();
  if (expired) {
    blocks_freed_by_timeout_ += kv->num_blocks();
    return nullptr;
  }
  error = TakeError::kNone;
  return kv;
}

int64_t KVExportStore::expire(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  int64_t freed = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (now < it->second.deadline) {
      ++it;
      continue;
    }
    freed += it->second.kv->num_blocks();
    it = entries_.erase(it);
  }
  pending_blocks_ -= freed;
  blocks_freed_by_timeout_ += freed;
  return freed;
}

void KVExportStore::count_sent(int64_t num_blocks) {
  std::lock_guard lock(mutex_);
  blocks_sent_ += num_blocks;
}

int64_t KVExportStore::blocks_sent() const {
  std::lock_guard lock(mutex_);
  return blocks_sent_;
}
int64_t KVExportStore::blocks_freed_by_timeout() const {
  std::lock_guard lock(mutex_);
  return blocks_freed_by_timeout_;
}
int64_t KVExportStore::num_pending_blocks() const {
  std::lock_guard lock(mutex_);
  return pending_blocks_;
}
int64_t KVExportStore::num_pending_entries() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(entries_.size());
}

}  // namespace pagoda::kv_transfer
