// The decode-graph buckets (vLLM's capture sizes): pure host arithmetic, no GPU needed.
#include "runtime/cuda/decode_graphs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace pagoda {
namespace {

TEST(DecodeGraphs, BucketsArePowersOfTwoThenMultiplesOfEight) {
  const std::pair<int64_t, int64_t> cases[] = {{1, 1},  {2, 2},   {3, 4},   {5, 8},     {8, 8},
                                               {9, 16}, {16, 16}, {17, 24}, {255, 256}, {256, 256}};
  for (const auto& [t, want] : cases) EXPECT_EQ(DecodeGraphs::bucket(t), want) << t;
}

TEST(DecodeGraphs, CapturedSizesCoverEveryBatchUpToTheLimit) {
  EXPECT_EQ(DecodeGraphs::buckets(1), std::vector<int>({1}));
  EXPECT_EQ(DecodeGraphs::buckets(0), std::vector<int>({1}));
  EXPECT_EQ(DecodeGraphs::buckets(20), std::vector<int>({1, 2, 4, 8, 16, 24}));
  const std::vector<int> all = DecodeGraphs::buckets(100000);
  ASSERT_EQ(all.size(), 4u + 31u);  // 1, 2, 4, 8, then 16 .. 256 by 8
  EXPECT_EQ(all.back(), DecodeGraphs::kMaxTokens);
  // Every batch size a step may have runs as one of them.
  for (int t = 1; t <= DecodeGraphs::kMaxTokens; ++t) {
    const int64_t b = DecodeGraphs::bucket(t);
    EXPECT_NE(std::find(all.begin(), all.end(), b), all.end()) << t;
  }
}

}  // namespace
}  // namespace pagoda
