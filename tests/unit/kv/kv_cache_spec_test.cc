// KVCacheSpec with the quantized cache dtypes: the byte counts (the pool's capacity grows by the
// byte ratio) and --kv-cache-dtype's names as vLLM spells them.
#include "kv/kv_cache_spec.h"

#include <gtest/gtest.h>

#include "core/status.h"

namespace pagoda::kv {
namespace {

KVCacheSpec spec(DType dtype) { return KVCacheSpec{16, 8, 64, dtype, KVLayout::kTokenMajor}; }

TEST(KVCacheSpecTest, BytesPerTokenFollowTheElementType) {
  // 2 (K, V) x 16 layers x 8 heads x 64 = 16,384 elements per token.
  EXPECT_EQ(spec(DType::kF32).bytes_per_token(), 65536);
  EXPECT_EQ(spec(DType::kBF16).bytes_per_token(), 32768);
  EXPECT_EQ(spec(DType::kF16).bytes_per_token(), 32768);
  for (const DType d : {DType::kF8E4M3, DType::kF8E5M2, DType::kI8}) {
    EXPECT_EQ(spec(d).bytes_per_token(), 16384);
    EXPECT_EQ(spec(d).element_bytes(), 1);
    EXPECT_EQ(spec(d).layer_block_bytes(16), 16 * 8 * 64);
    EXPECT_EQ(spec(d).block_bytes(16), 16 * 16384);
  }
}

TEST(KVCacheSpecTest, ParsesVllmNames) {
  EXPECT_EQ(parse_kv_cache_dtype("auto"), std::nullopt);
  EXPECT_EQ(parse_kv_cache_dtype("fp8"), DType::kF8E4M3);
  EXPECT_EQ(parse_kv_cache_dtype("fp8_e4m3"), DType::kF8E4M3);
  EXPECT_EQ(parse_kv_cache_dtype("fp8_e5m2"), DType::kF8E5M2);
  EXPECT_EQ(parse_kv_cache_dtype("int8"), DType::kI8);
  EXPECT_EQ(parse_kv_cache_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_kv_cache_dtype("float16"), DType::kF16);
  EXPECT_EQ(kv_cache_dtype_name(DType::kF8E4M3), "fp8_e4m3");
  EXPECT_EQ(kv_cache_dtype_name(DType::kF8E5M2), "fp8_e5m2");
  EXPECT_EQ(kv_cache_dtype_name(DType::kI8), "int8");
  EXPECT_EQ(kv_cache_dtype_name(DType::kF32), "float32");
  EXPECT_TRUE(kv_cache_dtype_scaled(DType::kI8));
  EXPECT_FALSE(kv_cache_dtype_scaled(DType::kBF16));
}

TEST(KVCacheSpecTest, RefusesOtherNamesNamingTheFlag) {
  auto message = [](const std::string& name) -> std::string {
    try {
      (void)parse_kv_cache_dtype(name);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message("fp4").find("--kv-cache-dtype 'fp4' must be auto, fp8, fp8_e4m3, fp8_e5m2, "
                                "int8, bfloat16 or float16"),
            std::string::npos);
  EXPECT_NE(message("FP8").find("--kv-cache-dtype 'FP8'"), std::string::npos);
  EXPECT_NE(message("fp8_inc").find("--kv-cache-dtype fp8_inc: not supported by pagoda"),
            std::string::npos);
  EXPECT_NE(message("fp8_ds_mla").find("DeepSeek MLA"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::kv
