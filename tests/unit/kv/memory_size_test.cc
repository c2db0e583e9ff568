#include "kv/memory_size.h"

#include <gtest/gtest.h>

#include "core/status.h"
#include "kv/kv_cache_config.h"
#include "kv/kv_cache_spec.h"

namespace pagoda::kv {
namespace {

TEST(MemorySize, ParsesSuffixesAndPlainBytes) {
  EXPECT_EQ(parse_memory_size("4G"), 4LL << 30);
  EXPECT_EQ(parse_memory_size("512M"), 512LL << 20);
  EXPECT_EQ(parse_memory_size("1.5G"), 3LL << 29);
  EXPECT_EQ(parse_memory_size("64k"), 64LL << 10);
  EXPECT_EQ(parse_memory_size("2T"), 2LL << 40);
  EXPECT_EQ(parse_memory_size("4GB"), 4LL << 30);
  EXPECT_EQ(parse_memory_size("4GiB"), 4LL << 30);
  EXPECT_EQ(parse_memory_size("1048576"), 1048576);
  EXPECT_EQ(parse_memory_size("100B"), 100);
  EXPECT_EQ(parse_memory_size("0"), 0);
  EXPECT_EQ(parse_memory_size(".5K"), 512);
  EXPECT_EQ(parse_memory_size("0.1K"), 102);  // rounds down to whole bytes
  EXPECT_EQ(parse_memory_size("8589934591G"), (8589934591LL << 30));
}

TEST(MemorySize, RejectsGarbageNamingTheValue) {
  for (const char* bad : {"", "G", "-1G", "4X", "4 G", " 4G", "4G ", "1.5", "1.G", "4GG", "4Gb2",
                          "1e9", "8589934592G", "99999999999999999999", "4BB"}) {
    try {
      (void)parse_memory_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(KVCacheSizing, BytesPerTokenAndBlocks) {
  // Llama-3-8B: 32 layers, 8 KV heads, head_dim 128, bf16 -> 128 KiB per token.
  const KVCacheSpec spec{32, 8, 128, DType::kBF16, KVLayout::kHeadMajor};
  const int64_t per_token = spec.bytes_per_token();
  EXPECT_EQ(per_token, 131072);
  EXPECT_EQ(num_blocks_for_memory(parse_memory_size("4G"), 16, per_token), 2048);
  EXPECT_EQ(num_blocks_for_memory(2 * 16 * per_token + 5, 16, per_token), 2);
  EXPECT_THROW((void)num_blocks_for_memory(2 * 16 * per_token - 1, 16, per_token), InvalidArgument);
  EXPECT_THROW((void)num_blocks_for_memory(0, 16, per_token), InvalidArgument);
  EXPECT_EQ(spec.block_bytes(16), 16 * per_token);
  EXPECT_EQ(spec.layer_block_bytes(16), 16 * 8 * 128 * 2);
  EXPECT_THROW((void)(KVCacheSpec{0, 8, 128, DType::kBF16}.bytes_per_token()), InvalidArgument);
  EXPECT_THROW((void)(KVCacheSpec{1 << 30, 1 << 20, 1 << 20, DType::kF32}.bytes_per_token()),
               InvalidArgument);
}

TEST(KVCacheSpec, OffsetsOfBothLayouts) {
  // Block 3, slot 5, head 2 of 8 heads of 128 elements, blocks of 16 tokens.
  KVCacheSpec spec{1, 8, 128, DType::kBF16, KVLayout::kHeadMajor};
  EXPECT_EQ(spec.offset(3, 5, 2, 16), ((3 * 8 + 2) * 16 + 5) * 128);
  spec.layout = KVLayout::kTokenMajor;
  EXPECT_EQ(spec.offset(3, 5, 2, 16), ((3 * 16 + 5) * 8 + 2) * 128);
}

}  // namespace
}  // namespace pagoda::kv
