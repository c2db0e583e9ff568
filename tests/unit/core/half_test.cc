#include "core/half.h"

#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(Half, Bf16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_bf16(f), h);
  }
}

TEST(Half, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_f16(f), h) << "half bits " << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)), 1.0f);  // tie -> even
  EXPECT_EQ(f16_to_float(float_to_f16(65520.0f)), INFINITY);
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 1.0f / 2048)), 1.0f);        // tie -> even
  EXPECT_EQ(f16_to_float(float_to_f16(5.96046448e-8f)), 5.96046448e-8f);  // smallest subnormal
}

}  // namespace
}  // namespace pagoda
