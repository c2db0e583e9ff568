#include "core/tensor.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(Tensor, ShapeAndBytes) {
  Buffer buffer(3 * 5 * sizeof(uint16_t));
  Tensor t{buffer.data(), DType::kBF16, Shape{3, 5}};
  EXPECT_EQ(t.num_elements(), 15);
  EXPECT_EQ(t.num_bytes(), 30u);
  EXPECT_EQ(t.shape.to_string(), "[3, 5]");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 64, 0u);
}

TEST(Tensor, DTypeNames) {
  EXPECT_EQ(dtype_from_safetensors("BF16"), DType::kBF16);
  EXPECT_EQ(dtype_from_safetensors("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(dtype_name(DType::kF8E5M2), "float8_e5m2");
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
  EXPECT_EQ(dtype_from_safetensors("C64"), std::nullopt);
  EXPECT_EQ(dtype_from_torch_name("torch.float16"), DType::kF16);
  EXPECT_EQ(dtype_name(DType::kF32), "float32");
}

}  // namespace
}  // namespace pagoda
