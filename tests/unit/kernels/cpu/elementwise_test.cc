// Tests of the row-wise CPU kernels (rms_norm, add_rms_norm, rope_neox, silu_and_mul, embedding)
// against fp64 references written the way Hugging Face transformers defines each op.
//
// How to add a case: add a size to the grid of the op's TEST (kRowCounts, kWidths, the position
// list, ...). Each comparison uses the normalised error max|got - ref| / max|ref| and the op's
// tolerance constant below, which says why it is that tight.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"

namespace pagoda::cpu {
namespace {

using testing::make_weights;
using testing::normalised_error;
using testing::random_floats;

// RMSNorm: one fp32 sum of n squares plus a few roundings per element.
constexpr double kNormTolerance = 2e-6;
// RoPE: cos/sin of the same fp32 angle, then two products and a sum.
constexpr double kRopeTolerance = 2e-6;
// silu: our vector exp is within a few ulp of expf.
constexpr double kSiluTolerance = 2e-6;

const int64_t kRowCounts[] = {1, 3, 17, 64};
const int64_t kWidths[] = {1, 3, 31, 64, 172, 257, 2048};

std::vector<double> reference_rms_norm(const std::vector<float>& x, const std::vector<float>& w,
                                       int64_t rows, int64_t n, float eps) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = x[r * n + i] * inv * w[i];
  }
  return out;
}

TEST(RmsNormTest, MatchesReferenceAndWorksInPlace) {
  ThreadPool pool(2);
  uint32_t seed = 10;
  int cases = 0;
  for (int64_t rows : kRowCounts) {
    for (int64_t n : kWidths) {
      for (float eps : {1e-5f, 1e-6f}) {
        // Scale the input far from 1 so that eps and the mean both matter.
        const auto x = random_floats(rows * n, ++seed, -3.0f, 3.0f);
        const auto w = random_floats(n, ++seed, 0.5f, 1.5f);
        const auto ref = reference_rms_norm(x, w, rows, n, eps);
        std::vector<float> out(x.size());
        rms_norm(x.data(), w.data(), rows, n, eps, out.data(), pool);
        EXPECT_LE(normalised_error(out, ref), kNormTolerance) << rows << "x" << n;
        auto inplace = x;
        rms_norm(inplace.data(), w.data(), rows, n, eps, inplace.data(), pool);
        EXPECT_EQ(inplace, out) << "in place differs, " << rows << "x" << n;
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 4 * 7 * 2);
}

TEST(RmsNormTest, AddRmsNormUpdatesResidual) {
  ThreadPool pool(2);
  uint32_t seed = 100;
  for (int64_t rows : kRowCounts) {
    for (int64_t n : kWidths) {
      auto residual = random_floats(rows * n, ++seed, -2.0f, 2.0f);
      const auto x = random_floats(rows * n, ++seed, -2.0f, 2.0f);
      const auto w = random_floats(n, ++seed, 0.5f, 1.5f);
      std::vector<float> sum(residual.size());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = residual[i] + x[i];  // fp32, as HF adds
      const auto ref = reference_rms_norm(sum, w, rows, n, 1e-5f);
      std::vector<float> out(x.size());
      add_rms_norm(residual.data(), x.data(), w.data(), rows, n, 1e-5f, out.data(), pool);
      EXPECT_EQ(residual, sum) << rows << "x" << n;
      EXPECT_LE(normalised_error(out, ref), kNormTolerance) << rows << "x" << n;
    }
  }
}

// HF: freqs = inv_freq (fp32) * position (fp32); q * cos + rotate_half(q) * sin.
void reference_rope(const std::vector<float>& x, int64_t tokens, int heads, int head_dim,
                    const std::vector<int32_t>& positions, const std::vector<float>& inv_freq,
                    std::vector<double>& out) {
  const int half = head_dim / 2;
  out.resize(x.size());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float* v = &x[(t * heads + h) * head_dim];
      double* o = &out[(t * heads + h) * head_dim];
      for (int i = 0; i < half; ++i) {
        const double angle = static_cast<float>(positions[t]) * inv_freq[i];  // fp32 product
        const double c = std::cos(angle), s = std::sin(angle);
        o[i] = v[i] * c - static_cast<double>(v[i + half]) * s;
        o[i + half] = v[i + half] * c + static_cast<double>(v[i]) * s;
      }
    }
  }
}

TEST(RopeTest, NeoxMatchesReference) {
  ThreadPool pool(2);
  const std::vector<int32_t> all_positions = {0, 1, 2, 7, 15, 16, 100, 1023, 4097, 32768, 131071};
  int cases = 0;
  for (int head_dim : {8, 64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{4, 4}, {8, 2}, {6, 1}}) {
      for (int64_t tokens : {1, 5, 11, 40}) {
        std::vector<int32_t> positions(tokens);
        for (int64_t t = 0; t < tokens; ++t) positions[t] = all_positions[t % all_positions.size()];
        // Llama-style inverse frequencies with base 500000.
        std::vector<float> inv_freq(head_dim / 2);
        for (int i = 0; i < head_dim / 2; ++i)
          inv_freq[i] = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * i / head_dim));
        auto q = random_floats(tokens * heads * head_dim, 200 + cases);
        auto k = random_floats(tokens * kv_heads * head_dim, 300 + cases);
        std::vector<double> q_ref, k_ref;
        reference_rope(q, tokens, heads, head_dim, positions, inv_freq, q_ref);
        reference_rope(k, tokens, kv_heads, head_dim, positions, inv_freq, k_ref);
        rope_neox(q.data(), k.data(), positions.data(), tokens, heads, kv_heads, head_dim,
                  inv_freq.data(), pool);
        EXPECT_LE(normalised_error(q, q_ref), kRopeTolerance) << head_dim << " " << tokens;
        EXPECT_LE(normalised_error(k, k_ref), kRopeTolerance) << head_dim << " " << tokens;
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 3 * 3 * 4);
}

TEST(SiluAndMulTest, MatchesReferenceIncludingExtremes) {
  ThreadPool pool(2);
  for (int64_t count : {1, 3, 15, 16, 17, 257, 8192, 70001}) {
    auto gate = random_floats(count, 400 + count, -12.0f, 12.0f);
    const auto up = random_floats(count, 500 + count, -2.0f, 2.0f);
    // Saturated inputs where exp overflows or underflows (only in longer inputs, where they do not
    // make up the whole normalisation scale).
    const float extremes[] = {-100.0f, 100.0f, -88.0f, 88.0f, -0.0f, 1e-20f};
    for (size_t i = 0; i < std::size(extremes) && count > 16; ++i)
      gate[(i * 7919) % gate.size()] = extremes[i];
    std::vector<double> ref(count);
    for (int64_t i = 0; i < count; ++i)
      ref[i] = gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))) * up[i];
    std::vector<float> out(count);
    silu_and_mul(gate.data(), up.data(), count, out.data(), pool);
    EXPECT_LE(normalised_error(out, ref), kSiluTolerance) << count;
    // Elementwise relative check too: the normalised bound alone would hide small-value errors.
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_NEAR(out[i], ref[i], 4e-6 * std::abs(ref[i]) + 1e-30) << "i=" << i << " g=" << gate[i];
    }
    // out may alias gate.
    silu_and_mul(gate.data(), up.data(), count, gate.data(), pool);
    EXPECT_EQ(gate, out);
  }
}

TEST(EmbeddingTest, GathersExactRowsForEveryDtype) {
  ThreadPool pool(2);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t hidden : {1, 3, 31, 64, 257, 2048}) {
      const int64_t vocab = 50;
      const auto table = make_weights(vocab * hidden, dtype, 600 + hidden);
      const std::vector<int32_t> ids = {0, 49, 3, 3, 17, 1, 48, 25, 0, 12, 33};
      std::vector<float> out(ids.size() * hidden);
      embedding(ids.data(), static_cast<int64_t>(ids.size()), table.bytes.data(), dtype, hidden,
                out.data(), pool);
      for (size_t t = 0; t < ids.size(); ++t) {
        for (int64_t i = 0; i < hidden; ++i) {
          ASSERT_EQ(out[t * hidden + i], table.values[ids[t] * hidden + i])
              << dtype_name(dtype) << " hidden=" << hidden << " t=" << t << " i=" << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::cpu
