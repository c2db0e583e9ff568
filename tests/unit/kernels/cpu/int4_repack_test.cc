// The GPU's W4 layout built on the host (kernels/cpu/int4_repack.h): repacked GPTQ and AWQ weights
// dequantize to exactly the checkpoint formats' own dequantizers (quant_dequant.h), over group
// sizes 32/64/128/per-channel, symmetric and asymmetric, act-order on and off, fused sources.
#include <gtest/gtest.h>

#include <cstring>

#include "w4_test_weights.h"

namespace pagoda::cpu {
namespace {

using testing::random_w4;
using testing::RandomW4;
using testing::W4Case;

void expect_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want, int64_t k,
                          const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << what << ": element (" << static_cast<int64_t>(i) / k << ", "
        << static_cast<int64_t>(i) % k << ") is " << got[i] << ", the format gives " << want[i];
  }
}

std::vector<float> dense_of(const W4Layout& l) {
  std::vector<float> w(static_cast<size_t>(l.n * l.k));
  dequantize_rows(l, 0, l.n, w.data());
  return w;
}

TEST(Int4Repack, DequantizesToTheCheckpointFormatsWeights) {
  int cases = 0;
  for (const bool awq : {false, true}) {
    for (const int64_t group : {32, 64, 128, -1}) {
      for (const bool sym : {true, false}) {
        for (const bool act : {false, true}) {
          if (awq && act) continue;
          for (const auto& [n, k] : {std::pair<int64_t, int64_t>{64, 128}, {40, 384}, {8, 256}}) {
            if (group > 0 && k % group != 0) continue;
            const W4Case c{awq, n, k, group, sym, act};
            const RandomW4 r = random_w4(c, static_cast<uint32_t>(cases + 1));
            const W4Layout l = r.layout();
            EXPECT_EQ(l.perm.empty(), !act || c.group_size() == k) << c.name();
            expect_bitwise_equal(dense_of(l), r.dense(), k, c.name());
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GE(cases, 60);
}

TEST(Int4Repack, FusedSourcesStackAtTheirRowsWithOneSharedPermutation) {
  // q (48 rows) and k (16 rows) of one act-order projection share g_idx (the same g_idx seed).
  const W4Case cq{false, 48, 256, 64, false, true}, ck{false, 16, 256, 64, false, true};
  const RandomW4 q = random_w4(cq, 11, 5), k = random_w4(ck, 12, 5);
  ASSERT_EQ(q.g_idx, k.g_idx);
  W4Layout l = make_w4_layout(64, 256, 64);
  ASSERT_TRUE(w4_permutation(q.g_idx.data(), 256, 64, &l.perm));
  EXPECT_EQ(repack_w4(q.gptq(), 0, &l), 0);
  EXPECT_EQ(repack_w4(k.gptq(), 48, &l), 0);
  std::vector<float> want = q.dense();
  const std::vector<float> wk = k.dense();
  want.insert(want.end(), wk.begin(), wk.end());
  expect_bitwise_equal(dense_of(l), want, 256, "stacked q, k");
}

TEST(Int4Repack, PermutationSortsFeaturesByGroup) {
  std::vector<int32_t> perm;
  const int32_t ident[] = {0, 0, 1, 1};
  ASSERT_TRUE(w4_permutation(ident, 4, 2, &perm));
  EXPECT_TRUE(perm.empty());
  const int32_t act[] = {1, 0, 0, 1};  // the header's worked example
  ASSERT_TRUE(w4_permutation(act, 4, 2, &perm));
  EXPECT_EQ(perm, (std::vector<int32_t>{1, 2, 0, 3}));
  const int32_t uneven[] = {1, 0, 0, 0};  // group 0 holds three features
  EXPECT_FALSE(w4_permutation(uneven, 4, 2, &perm));
}

TEST(Int4Repack, LayoutAddressingMatchesTheHeaderExample) {
  // k = 256, G = 128: W[5, 200] is nibble 0 of word 5 * 32 + 25 = 185, scaled by meta[11].
  W4Case c{false, 8, 256, 128, true, false};
  RandomW4 r = random_w4(c, 3);
  std::fill(r.qweight.begin(), r.qweight.end(), 0);
  // GPTQ element (l = 200, j = 5): word [200 / 8 = 25, 5], value t = 0.
  r.qweight[static_cast<size_t>(25 * 8 + 5)] = 0xb;
  const W4Layout l = r.layout();
  for (size_t i = 0; i < l.qweight.size(); ++i)
    EXPECT_EQ(l.qweight[i], i == 185 ? 0xbu : 0u) << "word " << i;
  EXPECT_EQ(l.meta[11] & 0xffffu, float_to_f16(r.scales[1 * 8 + 5]));
  EXPECT_EQ(l.meta[11] >> 16, 8u);
}

TEST(Int4Repack, CountsScalesThatFp16Rounds) {
  W4Case c{true, 8, 64, 32, true, false};
  RandomW4 r = random_w4(c, 4);
  r.scales[3] = 0.1f;  // not an fp16 value
  W4Layout l = make_w4_layout(8, 64, 32);
  EXPECT_EQ(repack_w4(r.awq(), 0, &l), 1);
}

}  // namespace
}  // namespace pagoda::cpu
