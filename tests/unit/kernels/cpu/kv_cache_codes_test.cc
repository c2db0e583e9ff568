// Tests of the quantized KV cache on the CPU: the codes of kernels/cpu/kv_cache_codes.h (exact
// round trips, saturation, ties to even), the quantizing cache write, and paged attention over a
// quantized cache against the same attention over an fp32 cache holding the dequantized values
// (equal bit for bit: the kernel dequantizes a chunk and then runs the fp32 arithmetic).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

#include "core/fp8.h"
#include "core/half.h"
#include "kernel_test_util.h"
#include "kernels/cpu/kv_cache_codes.h"
#include "kernels/cpu/paged_attention.h"

namespace pagoda::cpu {
namespace {

using testing::Batch;
using testing::make_paged_batch;
using testing::PagedBatch;
using testing::random_floats;

const DType kCacheDTypes[] = {DType::kF8E4M3, DType::kF8E5M2, DType::kI8, DType::kBF16,
                              DType::kF16};

/// The value code i of a cache of `dtype` stands for, computed here from core/ (not the kernel's
/// table): code * scale.
float code_value(const std::vector<uint8_t>& bytes, size_t i, DType dtype, float scale) {
  switch (dtype) {
    case DType::kF8E4M3:
      return e4m3_to_float(bytes[i]) * scale;
    case DType::kF8E5M2:
      return e5m2_to_float(bytes[i]) * scale;
    case DType::kI8:
      return static_cast<float>(static_cast<int8_t>(bytes[i])) * scale;
    case DType::kBF16: {
      uint16_t h = 0;
      std::memcpy(&h, &bytes[2 * i], 2);
      return bf16_to_float(h) * scale;
    }
    case DType::kF16: {
      uint16_t h = 0;
      std::memcpy(&h, &bytes[2 * i], 2);
      return f16_to_float(h) * scale;
    }
    default:
      return NAN;
  }
}

std::vector<uint8_t> quantize(const std::vector<float>& x, DType dtype, float scale) {
  std::vector<uint8_t> bytes(x.size() * dtype_size(dtype));
  quantize_kv_row(x.data(), static_cast<int64_t>(x.size()), dtype, scale, bytes.data());
  return bytes;
}

TEST(KVCacheCodesTest, EveryFp8AndInt8CodeRoundTrips) {
  for (const float scale : {1.0f, 0.03125f, 3.0f}) {
    for (const DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
      for (int c = 0; c < 256; ++c) {
        const float value = (dtype == DType::kF8E4M3 ? e4m3_to_float(static_cast<uint8_t>(c))
                                                     : e5m2_to_float(static_cast<uint8_t>(c))) *
                            scale;
        if (!std::isfinite(value)) continue;  // NaN codes (and e5m2's inf) are never written
        const auto bytes = quantize({value}, dtype, scale);
        // -0 and +0 are both zero; every other code comes back as itself.
        if (value == 0.0f) {
          EXPECT_EQ(bytes[0] & 0x7f, 0) << c;
        } else {
          EXPECT_EQ(bytes[0], c) << dtype_name(dtype) << " scale " << scale;
        }
        float back = 0;
        dequantize_kv_row(bytes.data(), 1, dtype, scale, &back);
        EXPECT_EQ(back, value);
      }
    }
    for (int c = -127; c <= 127; ++c) {
      const float value = static_cast<float>(c) * scale;
      const auto bytes = quantize({value}, DType::kI8, scale);
      EXPECT_EQ(static_cast<int8_t>(bytes[0]), c);
      float back = 0;
      dequantize_kv_row(bytes.data(), 1, DType::kI8, scale, &back);
      EXPECT_EQ(back, value);
    }
  }
}

TEST(KVCacheCodesTest, SaturatesAndRoundsHalfToEven) {
  // e4m3: 1.0 = 0x38, 1.125 = 0x39, 1.25 = 0x3a; the midpoints go to the even mantissa.
  EXPECT_EQ(quantize({1.0625f}, DType::kF8E4M3, 1.0f)[0], 0x38);
  EXPECT_EQ(quantize({1.1875f}, DType::kF8E4M3, 1.0f)[0], 0x3a);
  EXPECT_EQ(quantize({1e6f}, DType::kF8E4M3, 1.0f)[0], 0x7e);    // +448
  EXPECT_EQ(quantize({-1e6f}, DType::kF8E4M3, 1.0f)[0], 0xfe);   // -448
  EXPECT_EQ(quantize({1e9f}, DType::kF8E5M2, 1.0f)[0], 0x7b);    // +57344
  EXPECT_EQ(quantize({900.0f}, DType::kF8E4M3, 2.0f)[0], 0x7e);  // 450 saturates to 448
  // int8: ties to even, clamped to [-127, 127] (-128 is never written).
  const auto i8 = quantize({2.5f, 3.5f, -2.5f, -0.5f, 1000.0f, -1000.0f, 0.49f}, DType::kI8, 1.0f);
  const std::vector<int8_t> want = {2, 4, -2, 0, 127, -127, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(static_cast<int8_t>(i8[i]), want[i]) << i;
  // The header's worked example: 0.3 at scale 0.5 is code 0x32, read back as 0.3125.
  EXPECT_EQ(quantize({0.3f}, DType::kF8E4M3, 0.5f)[0], 0x32);
}

TEST(KVCacheCodesTest, RoundTripErrorIsHalfAStepOfEachFormat) {
  // x in [-4, 4] with the scale that maps 4 to the format's largest code: the error of a normal
  // value is at most half an ulp of the code (2^-4 relative for e4m3, 2^-3 for e5m2, 2^-8 for bf16,
  // 2^-11 for f16), and int8's at most half a step (scale / 2); subnormal codes (fp8) add an
  // absolute half-step of their spacing.
  const auto x = random_floats(4096, 7, -4.0f, 4.0f);
  struct Bound {
    DType dtype;
    float scale, relative, absolute;
  };
  const Bound bounds[] = {
      {DType::kF8E4M3, 4.0f / 448, 0.0625f, 4.0f / 448 * 0x1p-10f},
      {DType::kF8E5M2, 4.0f / 57344, 0.125f, 4.0f / 57344 * 0x1p-17f},
      {DType::kI8, 4.0f / 127, 0.0f, 4.0f / 127 / 2},
      {DType::kBF16, 1.0f, 0x1p-8f, 0.0f},
      {DType::kF16, 1.0f, 0x1p-11f, 0x1p-25f},
  };
  for (const Bound& b : bounds) {
    const auto bytes = quantize(x, b.dtype, b.scale);
    std::vector<float> back(x.size());
    dequantize_kv_row(bytes.data(), static_cast<int64_t>(x.size()), b.dtype, b.scale, back.data());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_LE(std::fabs(back[i] - x[i]), b.relative * std::fabs(x[i]) + b.absolute * 1.0001f)
          << dtype_name(b.dtype) << " x=" << x[i];
      EXPECT_EQ(back[i], code_value(bytes, i, b.dtype, b.scale));
    }
  }
}

/// One case: caches of `dtype` written through reshape_and_cache (KVCacheWrite, quantizing), and
/// fp32 caches holding code_value of each element; paged_attention over both.
void expect_quantized_equals_dequantized(DType dtype, int head_dim, int heads, int kv_heads,
                                         int block_size, int window, const Batch& batch,
                                         ThreadPool& pool, uint32_t seed) {
  const int d = head_dim, bs = block_size;
  const PagedBatch pb = make_paged_batch(batch, bs, /*spare_blocks=*/2, seed, /*unused=*/0);
  const int num_blocks = pb.num_blocks;
  std::vector<int64_t> slots;
  for (size_t s = 0; s < batch.size(); ++s)
    for (int pos = 0; pos < pb.seq_lens[s]; ++pos)
      slots.push_back(pb.slot(static_cast<int>(s), pos, bs));
  const int64_t row = int64_t{kv_heads} * d;
  const auto total = static_cast<int64_t>(slots.size());
  // Values up to 6 and scales that put them mid-range of each format.
  const auto k = random_floats(static_cast<size_t>(total * row), seed + 1, -6.0f, 6.0f);
  const auto v = random_floats(static_cast<size_t>(total * row), seed + 2, -3.0f, 3.0f);
  const KVScales scales = dtype == DType::kI8 ? KVScales{6.0f / 127, 3.0f / 127}
                          : dtype == DType::kBF16 || dtype == DType::kF16
                              ? KVScales{}
                              : KVScales{0.03f, 0.0125f};
  PagedKVLayout layout{num_blocks, bs, kv_heads, d, dtype};
  const size_t elements = static_cast<size_t>(num_blocks) * bs * row;
  std::vector<uint8_t> kq(elements * dtype_size(dtype)), vq(kq.size());
  reshape_and_cache(
      KVCacheWrite{k.data(), v.data(), slots.data(), total, kq.data(), vq.data(), layout, scales},
      pool);
  std::vector<float> kf(elements, 0.0f), vf(elements, 0.0f);
  for (const int64_t slot : slots) {
    for (int64_t e = slot * row; e < (slot + 1) * row; ++e) {
      kf[static_cast<size_t>(e)] = code_value(kq, static_cast<size_t>(e), dtype, scales.k);
      vf[static_cast<size_t>(e)] = code_value(vq, static_cast<size_t>(e), dtype, scales.v);
    }
  }

  const int64_t num_tokens = pb.query_start_loc.back();
  const auto q = random_floats(static_cast<size_t>(num_tokens) * heads * d, seed + 3, -2, 2);
  std::vector<float> out_q(q.size(), NAN), out_f(q.size(), NAN);
  PagedAttentionParams p;
  p.q = q.data();
  p.positions = pb.positions.data();
  p.query_start_loc = pb.query_start_loc.data();
  p.seq_lens = pb.seq_lens.data();
  p.block_tables = pb.tables.data();
  p.num_tokens = num_tokens;
  p.num_seqs = static_cast<int>(batch.size());
  p.num_heads = heads;
  p.max_blocks_per_seq = pb.max_blocks;
  p.sliding_window = window;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.softcap = window == 5 ? 30.0f : 0.0f;

  p.key_cache = kq.data();
  p.value_cache = vq.data();
  p.out = out_q.data();
  p.layout = layout;
  p.scales = scales;
  paged_attention(p, pool);

  p.key_cache = kf.data();
  p.value_cache = vf.data();
  p.out = out_f.data();
  p.layout.dtype = DType::kF32;
  p.scales = KVScales{};
  paged_attention(p, pool);

  for (size_t i = 0; i < out_q.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(out_q[i]), std::bit_cast<uint32_t>(out_f[i]))
        << dtype_name(dtype) << " d=" << d << " heads " << heads << "/" << kv_heads << " block "
        << bs << " window " << window << " element " << i;
  }
}

TEST(KVCacheCodesTest, AttentionOverQuantizedCacheEqualsAttentionOverItsValues) {
  const std::vector<Batch> batches = {
      {{0, 37}},                            // prefill
      {{20, 13}},                           // chunked prefill after a cached prefix
      {{0, 33}, {49, 1}, {0, 1}, {17, 5}},  // prefill + decodes + chunk
      {{0, 1}, {15, 1}, {16, 1}, {99, 1}},  // decodes across block boundaries
  };
  int cases = 0;
  uint32_t seed = 11;
  for (const int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (const DType dtype : kCacheDTypes) {
      for (const auto& [d, heads, kv_heads] : {std::tuple{64, 8, 2}, std::tuple{40, 6, 6}}) {
        for (const int window : {0, 5}) {
          for (const auto& batch : batches) {
            expect_quantized_equals_dequantized(dtype, d, heads, kv_heads, 16, window, batch, pool,
                                                seed += 5);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 2 * 5 * 2 * 2 * 4);
}

}  // namespace
}  // namespace pagoda::cpu
