// KVExportStore: one pull per entry, fingerprints checked before an entry is given out, the keep
// timeout freeing what was not pulled, and the counters; the checkpoint sample of the layout
// fingerprint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kv_transfer/export_store.h"

namespace pagoda::kv_transfer {
namespace {

using std::chrono::milliseconds;
using TakeError = KVExportStore::TakeError;

std::shared_ptr<ExportedKV> blocks(int n, uint64_t fingerprint = 7) {
  auto kv = std::make_shared<ExportedKV>();
  kv->fingerprint = fingerprint;
  kv->block_size = 4;
  kv->block_bytes = 8;
  kv->token_ids.assign(static_cast<size_t>(n * 4), 1);
  kv->bytes.resize(static_cast<size_t>(n * 8));
  for (size_t i = 0; i < kv->bytes.size(); ++i) kv->bytes[i] = static_cast<std::byte>(i);
  kv->compute_checksums();
  return kv;
}

TEST(KVExportStore, APullTakesTheEntryOnce) {
  KVExportStore store(milliseconds(1000));
  const auto t0 = KVExportStore::Clock::now();
  store.put("a", blocks(3), t0);
  EXPECT_EQ(store.num_pending_blocks(), 3);
  TakeError error;
  EXPECT_EQ(store.take("a", 8, error, t0), nullptr);  // another layout: refused, kept
  EXPECT_EQ(error, TakeError::kLayoutMismatch);
  EXPECT_EQ(store.num_pending_blocks(), 3);
  const auto kv = store.take("a", 7, error, t0);
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(error, TakeError::kNone);
  EXPECT_EQ(kv->num_blocks(), 3);
  EXPECT_EQ(store.num_pending_blocks(), 0);
  EXPECT_EQ(store.take("a", 7, error, t0), nullptr);
  EXPECT_EQ(error, TakeError::kUnknown);
  store.count_sent(3);
  EXPECT_EQ(store.blocks_sent(), 3);
  EXPECT_EQ(store.blocks_freed_by_timeout(), 0);
}

TEST(KVExportStore, TheKeepTimeoutFreesWhatWasNotPulled) {
  KVExportStore store(milliseconds(100));
  const auto t0 = KVExportStore::Clock::now();
  store.put("a", blocks(2), t0);
  store.put("b", blocks(5), t0 + milliseconds(50));
  EXPECT_EQ(store.expire(t0 + milliseconds(99)), 0);
  EXPECT_EQ(store.expire(t0 + milliseconds(100)), 2);  // a's deadline
  EXPECT_EQ(store.num_pending_entries(), 1);
  TakeError error;
  // b is past its deadline when pulled: freed there, and counted.
  EXPECT_EQ(store.take("b", 7, error, t0 + milliseconds(150)), nullptr);
  EXPECT_EQ(error, TakeError::kUnknown);
  EXPECT_EQ(store.blocks_freed_by_timeout(), 7);
  EXPECT_EQ(store.num_pending_blocks(), 0);
}

TEST(KVExportStore, ChecksumsAreXxh3OfEachBlock) {
  const auto kv = blocks(2);
  ASSERT_EQ(kv->checksums.size(), 2u);
  EXPECT_EQ(kv->checksums[1], block_checksum(kv->block(1)));
  EXPECT_NE(kv->checksums[0], kv->checksums[1]);  // different bytes
  EXPECT_NE(layout_fingerprint("a"), layout_fingerprint("b"));
}

/// A directory holding model.safetensors of `bytes` (and a config.json, which is not sampled).
std::filesystem::path checkpoint(const std::string& name, const std::vector<char>& bytes) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("pagoda_sample_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "model.safetensors", std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::ofstream(dir / "config.json") << name;
  return dir;
}

TEST(CheckpointSample, SeesBothEndsOfEveryWeightFile) {
  std::vector<char> base(3 << 20);
  for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<char>(i * 31 + 7);
  std::vector<char> head = base, tail = base, middle = base;
  head[100] ^= 1;                  // in the first MiB
  tail[tail.size() - 5] ^= 1;      // in the last MiB
  middle[middle.size() / 2] ^= 1;  // between them: not read
  const auto a = checkpoint("a", base), b = checkpoint("b", base);
  const auto h = checkpoint("h", head), t = checkpoint("t", tail), m = checkpoint("m", middle);
  const auto none = std::filesystem::temp_directory_path() /
                    ("pagoda_sample_" + std::to_string(::getpid()) + "_none");
  std::filesystem::create_directories(none);
  const uint64_t s = checkpoint_sample(a.string());
  EXPECT_NE(s, 0u);
  EXPECT_EQ(checkpoint_sample(b.string()), s);  // the same weights elsewhere
  EXPECT_NE(checkpoint_sample(h.string()), s);
  EXPECT_NE(checkpoint_sample(t.string()), s);
  EXPECT_EQ(checkpoint_sample(m.string()), s);  // a sample: the middle is not read
  EXPECT_EQ(checkpoint_sample(none.string()), 0u);
  for (const auto& d : {a, b, h, t, m, none}) std::filesystem::remove_all(d);
}

}  // namespace
}  // namespace pagoda::kv_transfer
