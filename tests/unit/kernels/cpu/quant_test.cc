// The CPU quantization kernels against references written here from the formats' definitions:
// float codes by brute-force nearest search over every code, the packings as the quantizers
// (AutoGPTQ, AutoAWQ, compressed-tensors) write them, products as plain double-precision sums.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "kernels/cpu/quant_dequant.h"
#include "kernels/cpu/quant_gemm.h"

namespace pagoda::cpu {
namespace {

// ---- float codes -------------------------------------------------------------------------------

/// The value of a code of a float format with `e` exponent and `m` mantissa bits, from the
/// definition (bias 2^(e-1) - 1, subnormals at exponent 0); special codes are left to the caller.
double code_value(uint32_t code, int e, int m) {
  const uint32_t sign = code >> (e + m);
  const uint32_t exp = (code >> m) & ((1u << e) - 1);
  const uint32_t mant = code & ((1u << m) - 1);
  const int bias = (1 << (e - 1)) - 1;
  const double mag = exp == 0 ? std::ldexp(static_cast<double>(mant), 1 - bias - m)
                              : std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -m),
                                           static_cast<int>(exp) - bias);
  return sign != 0 ? -mag : mag;
}

/// The code nearest to v among `finite` codes (ties: the even mantissa), saturating.
uint8_t nearest_code(float v, const std::vector<std::pair<uint8_t, double>>& finite) {
  uint8_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (const auto& [code, value] : finite) {
    if (std::signbit(value) != std::signbit(v) && value != 0) continue;
    const double err = std::abs(static_cast<double>(v) - value);
    const bool tie = err == best_err;
    if (err < best_err || (tie && (code & 1) == 0)) {
      best = code;
      best_err = err;
    }
  }
  return best;
}

TEST(QuantCodes, E4M3DecodesEveryCode) {
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(e4m3_to_float(static_cast<uint8_t>(c)), code_value(c, 4, 3)) << c;
  }
}

TEST(QuantCodes, E5M2AndE2M1AndE8M0Decode) {
  EXPECT_EQ(e5m2_to_float(0x3c), 1.0f);
  EXPECT_EQ(e5m2_to_float(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(e5m2_to_float(0x7c)));
  for (uint32_t c = 0; c < 256; ++c) {
    if (((c >> 2) & 0x1f) == 0x1f) continue;
    EXPECT_EQ(e5m2_to_float(static_cast<uint8_t>(c)), code_value(c, 5, 2)) << c;
  }
  for (uint32_t c = 0; c < 16; ++c)
    EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c)), code_value(c, 2, 1)) << c;
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_to_float(120), std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(e8m0_to_float(0xff)));
}

/// Encoding is the nearest code (ties to even), saturating, for random values, every code's
/// value and every midpoint between neighbouring codes.
void check_encoder(uint8_t (*encode)(float), float (*decode)(uint8_t), int codes, float max) {
  std::vector<std::pair<uint8_t, double>> finite;
  for (int c = 0; c < codes; ++c) {
    const float v = decode(static_cast<uint8_t>(c));
    if (std::isfinite(v)) finite.emplace_back(static_cast<uint8_t>(c), v);
  }
  std::vector<float> probes;
  for (const auto& [c, v] : finite) {
    probes.push_back(static_cast<float>(v));
    for (const auto& [c2, v2] : finite) {
      // Midpoints of neighbours of the same sign (exact in float: they have few bits).
      if (c2 == c + 1 && std::signbit(v) == std::signbit(v2))
        probes.push_back(static_cast<float>((v + v2) / 2));
    }
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.2f * max, 1.2f * max);
  for (int i = 0; i < 4000; ++i) probes.push_back(u(rng) / (i % 7 == 0 ? 1000.0f : 1.0f));
  probes.push_back(1e30f);
  probes.push_back(-1e30f);
  for (float v : probes) {
    const uint8_t want = nearest_code(std::clamp(v, -max, max), finite);
    EXPECT_EQ(decode(encode(v)), decode(want)) << "v = " << v;
  }
}

TEST(QuantCodes, EncodersRoundToNearestEvenAndSaturate) {
  check_encoder(float_to_e4m3, e4m3_to_float, 256, kE4M3Max);
  check_encoder(float_to_e5m2, e5m2_to_float, 256, kE5M2Max);
  check_encoder(float_to_e2m1, e2m1_to_float, 16, kE2M1Max);
  EXPECT_EQ(float_to_e4m3(0.3f), 0x2a);  // the worked example of core/fp8.h
  EXPECT_EQ(float_to_e4m3(1000.0f), 0x7e);
  EXPECT_EQ(float_to_e2m1(-2.5f), 0xc);  // tie between 2 (even mantissa) and 3
}

// ---- packings ----------------------------------------------------------------------------------

/// A random int matrix of `bits`-bit codes, [rows, cols].
std::vector<int32_t> random_codes(int64_t rows, int64_t cols, int bits, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> q(static_cast<size_t>(rows * cols));
  for (int32_t& x : q) x = static_cast<int32_t>(rng() & ((1u << bits) - 1));
  return q;
}

std::vector<float> random_scales(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.001f, 0.05f);
  std::vector<float> s(n);
  for (float& x : s) x = u(rng);
  return s;
}

/// AutoGPTQ's pack: W^T codes qt [k, n] (element (l, j)) into qweight [k / pack, n], value t of
/// word (i, j) = qt[i * pack + t, j] in bits [t * bits, (t + 1) * bits).
std::vector<int32_t> gptq_pack_rows(const std::vector<int32_t>& qt, int64_t k, int64_t n,
                                    int bits) {
  const int pack = 32 / bits;
  std::vector<int32_t> out(static_cast<size_t>(k / pack * n), 0);
  for (int64_t i = 0; i < k / pack; ++i)
    for (int64_t j = 0; j < n; ++j) {
      uint32_t word = 0;
      for (int t = 0; t < pack; ++t)
        word |= static_cast<uint32_t>(qt[static_cast<size_t>((i * pack + t) * n + j)])
                << (bits * t);
      out[static_cast<size_t>(i * n + j)] = static_cast<int32_t>(word);
    }
  return out;
}

/// AutoAWQ's GEMM pack: codes qt [k, n] into [k, n / 8]; nibble i of word (l, c) holds column
/// c * 8 + order[i], order = {0, 2, 4, 6, 1, 3, 5, 7}.
std::vector<int32_t> awq_pack(const std::vector<int32_t>& qt, int64_t k, int64_t n) {
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  std::vector<int32_t> out(static_cast<size_t>(k * n / 8), 0);
  for (int64_t l = 0; l < k; ++l)
    for (int64_t c = 0; c < n / 8; ++c) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i)
        word |= static_cast<uint32_t>(qt[static_cast<size_t>(l * n + c * 8 + order[i])]) << (4 * i);
      out[static_cast<size_t>(l * (n / 8) + c)] = static_cast<int32_t>(word);
    }
  return out;
}

void expect_rows(const std::function<void(int64_t, int64_t, float*)>& rows,
                 const std::vector<double>& want, int64_t n, int64_t k) {
  // Whole, then in uneven tiles.
  for (const int64_t tile : {n, int64_t{3}, int64_t{1}}) {
    for (int64_t r0 = 0; r0 < n; r0 += tile) {
      const int64_t r1 = std::min(n, r0 + tile);
      std::vector<float> got(static_cast<size_t>((r1 - r0) * k));
      rows(r0, r1, got.data());
      for (int64_t j = r0; j < r1; ++j)
        for (int64_t l = 0; l < k; ++l)
          ASSERT_EQ(got[static_cast<size_t>((j - r0) * k + l)],
                    static_cast<float>(want[static_cast<size_t>(j * k + l)]))
              << "row " << j << " col " << l << " tile " << tile;
    }
  }
}

TEST(QuantPacking, GptqDequantizesEveryBitsGroupAndActOrder) {
  for (const int bits : {4, 8}) {
    for (const int64_t group : {int64_t{32}, int64_t{64}, int64_t{128}, int64_t{-1}}) {
      for (const bool act_order : {false, true}) {
        const int64_t k = 256, n = 24;
        const int64_t g_size = group == -1 ? k : group;
        const int64_t groups = k / g_size;
        const std::vector<int32_t> qt = random_codes(k, n, bits, 3);
        const std::vector<int32_t> zeros = random_codes(groups, n, bits, 4);
        const std::vector<float> scales = random_scales(static_cast<size_t>(groups * n), 5);
        std::vector<int32_t> g_idx(static_cast<size_t>(k));
        std::mt19937 rng(6);
        for (int64_t l = 0; l < k; ++l)
          g_idx[static_cast<size_t>(l)] =
              static_cast<int32_t>(act_order ? static_cast<int64_t>(rng() % groups) : l / g_size);
        const std::vector<int32_t> qweight = gptq_pack_rows(qt, k, n, bits);
        std::vector<double> want(static_cast<size_t>(n * k));
        for (int64_t j = 0; j < n; ++j)
          for (int64_t l = 0; l < k; ++l) {
            const auto g = static_cast<size_t>(g_idx[static_cast<size_t>(l)]);
            const size_t gj = g * static_cast<size_t>(n) + static_cast<size_t>(j);
            want[static_cast<size_t>(j * k + l)] =
                static_cast<double>(scales[gj]) * (qt[static_cast<size_t>(l * n + j)] - zeros[gj]);
          }
        GptqWeight w;
        w.qweight = qweight.data();
        w.bits = bits;
        w.n = n;
        w.k = k;
        w.g_idx = g_idx.data();
        w.scales = scales.data();
        w.zeros = zeros.data();
        SCOPED_TRACE(::testing::Message()
                     << bits << " bits, group " << group << " act-order " << act_order);
        expect_rows([&](int64_t r0, int64_t r1, float* d) { dequantize_rows(w, r0, r1, d); }, want,
                    n, k);
      }
    }
  }
}

TEST(QuantPacking, AwqDequantizesInItsInterleavedOrder) {
  const int64_t k = 128, n = 32;
  for (const int64_t group : {int64_t{32}, int64_t{64}, int64_t{128}}) {
    const std::vector<int32_t> qt = random_codes(k, n, 4, 7);
    const std::vector<int32_t> zeros = random_codes(k / group, n, 4, 8);
    const std::vector<float> scales = random_scales(static_cast<size_t>(k / group * n), 9);
    const std::vector<int32_t> qweight = awq_pack(qt, k, n);
    std::vector<double> want(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) {
        const auto gj = static_cast<size_t>((l / group) * n + j);
        want[static_cast<size_t>(j * k + l)] =
            (qt[static_cast<size_t>(l * n + j)] - zeros[gj]) * static_cast<double>(scales[gj]);
      }
    AwqWeight w;
    w.qweight = qweight.data();
    w.n = n;
    w.k = k;
    w.group_size = group;
    w.scales = scales.data();
    w.zeros = zeros.data();
    SCOPED_TRACE(::testing::Message() << "group " << group);
    expect_rows([&](int64_t r0, int64_t r1, float* d) { dequantize_rows(w, r0, r1, d); }, want, n,
                k);
  }
  // The worked example of quant_dequant.cc: column 10 of W^T sits in word 1, nibble 1.
  std::vector<int32_t> one(static_cast<size_t>(16), 0);
  one[10] = 0xb;
  EXPECT_EQ(awq_pack(one, 1, 16)[1], 0xb << 4);
}

TEST(QuantPacking, Fp4AndFp8Dequantize) {
  const int64_t n = 12, k = 64;
  std::vector<uint8_t> codes(static_cast<size_t>(n * k));
  std::mt19937 rng(11);
  for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() & 0xf);
  for (const int64_t block : {int64_t{16}, int64_t{32}}) {
    std::vector<uint8_t> packed(static_cast<size_t>(n * k / 2));
    for (size_t i = 0; i < packed.size(); ++i)
      packed[i] = static_cast<uint8_t>(codes[2 * i] | codes[2 * i + 1] << 4);
    const std::vector<float> scales = random_scales(static_cast<size_t>(n * k / block), 12);
    std::vector<double> want(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l)
        want[static_cast<size_t>(j * k + l)] =
            code_value(codes[static_cast<size_t>(j * k + l)], 2, 1) *
            static_cast<double>(scales[static_cast<size_t>(j * (k / block) + l / block)]);
    Fp4Weight w{packed.data(), n, k, block, scales.data()};
    expect_rows([&](int64_t r0, int64_t r1, float* d) { dequantize_rows(w, r0, r1, d); }, want, n,
                k);
  }
  // FP8 per row and per block [4, 16] (a partial last block of columns: k = 40).
  const int64_t k8 = 40;
  std::vector<uint8_t> q8(static_cast<size_t>(n * k8));
  for (uint8_t& c : q8) c = static_cast<uint8_t>(rng() & 0xff) & 0xf7;  // no NaN codes
  const std::vector<float> rows = random_scales(static_cast<size_t>(n), 13);
  const std::vector<float> blocks = random_scales(static_cast<size_t>(3 * 3), 14);
  std::vector<double> want_rows(static_cast<size_t>(n * k8)), want_blocks(want_rows.size());
  for (int64_t j = 0; j < n; ++j)
    for (int64_t l = 0; l < k8; ++l) {
      const double v = code_value(q8[static_cast<size_t>(j * k8 + l)], 4, 3);
      want_rows[static_cast<size_t>(j * k8 + l)] = v * rows[static_cast<size_t>(j)];
      want_blocks[static_cast<size_t>(j * k8 + l)] =
          v * blocks[static_cast<size_t>((j / 4) * 3 + l / 16)];
    }
  Fp8Weight per_row{q8.data(), n, k8, rows.data(), nullptr, 0, 0};
  Fp8Weight per_block{q8.data(), n, k8, nullptr, blocks.data(), 4, 16};
  expect_rows([&](int64_t r0, int64_t r1, float* d) { dequantize_rows(per_row, r0, r1, d); },
              want_rows, n, k8);
  expect_rows([&](int64_t r0, int64_t r1, float* d) { dequantize_rows(per_block, r0, r1, d); },
              want_blocks, n, k8);
}

// ---- products ----------------------------------------------------------------------------------

TEST(QuantGemm, DequantMatmulEqualsFp32MatmulOverAShapeGrid) {
  ThreadPool pool(2);
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const int64_t m : {1, 3, 17}) {
    for (const int64_t k : {16, 72, 1040}) {
      for (const int64_t n : {1, 5, 64, 67}) {
        std::vector<float> x(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k));
        for (float& v : x) v = u(rng);
        for (float& v : w) v = u(rng);
        const int64_t ldy = n + 3;
        std::vector<float> y(static_cast<size_t>(m * ldy), 7.0f);
        dequant_matmul(
            x.data(), m, k, n,
            [&](int64_t r0, int64_t r1, float* dst) {
              std::copy(w.begin() + r0 * k, w.begin() + r1 * k, dst);
            },
            y.data(), ldy, pool);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double want = 0, mag = 0;
            for (int64_t l = 0; l < k; ++l) {
              want += static_cast<double>(x[static_cast<size_t>(i * k + l)]) *
                      w[static_cast<size_t>(j * k + l)];
              mag +=
                  std::abs(x[static_cast<size_t>(i * k + l)] * w[static_cast<size_t>(j * k + l)]);
            }
            ASSERT_NEAR(y[static_cast<size_t>(i * ldy + j)], want, 1e-6 * mag + 1e-6)
                << m << "x" << k << "x" << n << " at " << i << "," << j;
          }
          for (int64_t j = n; j < ldy; ++j) ASSERT_EQ(y[static_cast<size_t>(i * ldy + j)], 7.0f);
        }
      }
    }
  }
}

TEST(QuantGemm, Int8MatmulIsExact) {
  ThreadPool pool(2);
  std::mt19937 rng(22);
  for (const int64_t m : {1, 4}) {
    for (const int64_t k : {1, 63, 64, 65, 300}) {
      const int64_t n = 9;
      std::vector<int8_t> qx(static_cast<size_t>(m * k)), qw(static_cast<size_t>(n * k));
      for (int8_t& v : qx) v = static_cast<int8_t>(rng());
      for (int8_t& v : qw) v = static_cast<int8_t>(rng());
      qx[0] = -128;  // the extremes
      qw[0] = -128;
      std::vector<int32_t> sums(static_cast<size_t>(n), 0);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t l = 0; l < k; ++l)
          sums[static_cast<size_t>(j)] += qw[static_cast<size_t>(j * k + l)];
      const std::vector<float> sx = random_scales(static_cast<size_t>(m), 23);
      const std::vector<float> sw = random_scales(static_cast<size_t>(n), 24);
      const std::vector<float> bias = random_scales(static_cast<size_t>(n), 25);
      std::vector<float> y(static_cast<size_t>(m * n));
      Int8MatmulParams p;
      p.qx = qx.data();
      p.x_scale = sx.data();
      p.m = m;
      p.k = k;
      p.qw = qw.data();
      p.w_row_sums = sums.data();
      p.w_scale = sw.data();
      p.bias = bias.data();
      p.n = n;
      p.y = y.data();
      p.ldy = n;
      int8_matmul(p, pool);
      // The int32 sums exactly (unit scales, no bias), then the scaled outputs.
      const std::vector<float> ones(static_cast<size_t>(std::max(m, n)), 1.0f);
      std::vector<float> sums_out(static_cast<size_t>(m * n));
      Int8MatmulParams exact = p;
      exact.x_scale = ones.data();
      exact.w_scale = ones.data();
      exact.bias = nullptr;
      exact.y = sums_out.data();
      int8_matmul(exact, pool);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          int64_t acc = 0;
          for (int64_t l = 0; l < k; ++l)
            acc += int64_t{qx[static_cast<size_t>(i * k + l)]} * qw[static_cast<size_t>(j * k + l)];
          ASSERT_EQ(sums_out[static_cast<size_t>(i * n + j)], static_cast<float>(acc))
              << k << " " << i << "," << j;
          const double want =
              static_cast<double>(acc) * sx[static_cast<size_t>(i)] * sw[static_cast<size_t>(j)] +
              bias[static_cast<size_t>(j)];
          ASSERT_NEAR(y[static_cast<size_t>(i * n + j)], want, 1e-6 * std::abs(want) + 1e-7)
              << k << " " << i << "," << j;
        }
    }
  }
}

TEST(QuantGemm, ActivationQuantizersFollowVllm) {
  // INT8 per token: s = max|x| / 127, q = round-half-even(x * 127 / max|x|).
  const std::vector<float> x{50.0f, -127.0f, 0.5f, 0.0f, 0.0f, 0.0f};
  std::vector<int8_t> q(6);
  std::vector<float> s(2);
  quantize_int8_rows(x.data(), 2, 3, 0.0f, q.data(), s.data());
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(q[0], 50);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 0);  // 0.5 rounds to the even 0
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_EQ(q[3], 0);
  // Static: x / s saturating.
  const std::vector<float> xs{0.5f, -1.27f, 0.005f};
  quantize_int8_rows(xs.data(), 1, 3, 0.004f, q.data(), s.data());
  EXPECT_EQ(q[0], 125);
  EXPECT_EQ(q[1], -128);
  EXPECT_EQ(q[2], 1);  // 1.25
  EXPECT_EQ(s[0], 0.004f);
  // FP8 per token and per group: x_hat = e4m3(x / s) * s with s = max|x| / 448.
  std::vector<float> row(64);
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (float& v : row) v = u(rng);
  for (const int64_t group : {int64_t{64}, int64_t{16}}) {
    std::vector<float> out(64);
    fake_quantize_fp8_rows(row.data(), 1, 64, 0.0f, group, out.data());
    for (int64_t g0 = 0; g0 < 64; g0 += group) {
      float amax = 0;
      for (int64_t l = g0; l < g0 + group; ++l)
        amax = std::max(amax, std::abs(row[static_cast<size_t>(l)]));
      const float sc = amax / 448.0f;
      for (int64_t l = g0; l < g0 + group; ++l) {
        const auto i = static_cast<size_t>(l);
        EXPECT_EQ(out[i], e4m3_to_float(float_to_e4m3(row[i] / sc)) * sc);
        EXPECT_LE(std::abs(out[i] - row[i]), std::abs(row[i]) / 16 + 1e-6f);
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::cpu
