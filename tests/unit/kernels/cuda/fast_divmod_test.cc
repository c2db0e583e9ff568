// FastDivmod against the hardware division: every divisor the KV cache may have (1-4096) over
// small numerators exhaustively, and over the whole 31-bit range at random and at the edges.
#include "kernels/cuda/fast_divmod.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace pagoda::cuda {
namespace {

void expect_matches(const FastDivmod& f, uint32_t n) {
  uint32_t q = 0, r = 0;
  f.divmod(n, &q, &r);
  ASSERT_EQ(q, n / f.divisor) << "n = " << n << ", d = " << f.divisor;
  ASSERT_EQ(r, n % f.divisor) << "n = " << n << ", d = " << f.divisor;
}

TEST(FastDivmod, MatchesDivisionForEveryBlockSize) {
  std::mt19937 gen(1);
  std::uniform_int_distribution<uint32_t> any(0, (1u << 31) - 1);
  for (uint32_t d = 1; d <= 4096; ++d) {
    const FastDivmod f(d);
    for (uint32_t n = 0; n < 3 * d + 70; ++n) expect_matches(f, n);
    for (uint32_t n : {(1u << 31) - 1, (1u << 31) - d, (1u << 30) + 1, 1u << 30})
      expect_matches(f, n);
    for (int i = 0; i < 200; ++i) expect_matches(f, any(gen));
  }
}

TEST(FastDivmod, LargeDivisors) {
  std::mt19937 gen(2);
  std::uniform_int_distribution<uint32_t> any(0, (1u << 31) - 1);
  for (int i = 0; i < 2000; ++i) {
    const FastDivmod f(any(gen) + 1);
    for (int j = 0; j < 50; ++j) expect_matches(f, any(gen));
    expect_matches(f, f.divisor - 1);
    expect_matches(f, f.divisor);
  }
}

}  // namespace
}  // namespace pagoda::cuda
