#include "kernels/cpu/kv_cache_codes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/fp8.h"
#include "core/half.h"

namespace pagoda::cpu {
namespace {

// The value of every fp8 code, so that dequantizing is a table load and one product.
struct Fp8Tables {
  std::array<float, 256> e4m3{}, e5m2{};
  Fp8Tables() {
    for (int c = 0; c < 256; ++c) {
      e4m3[static_cast<size_t>(c)] = e4m3_to_float(static_cast<uint8_t>(c));
      e5m2[static_cast<size_t>(c)] = e5m2_to_float(static_cast<uint8_t>(c));
    }
  }
};

const Fp8Tables& fp8_tables() {
  static const Fp8Tables tables;
  return tables;
}

}  // namespace

bool kv_cache_dtype_supported(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI8:
      return true;
    default:
      return false;
  }
}

void quantize_kv_row(const float* x, int64_t n, DType dtype, float scale, void* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(x[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_f16(x[i]);
      return;
    }
    case DType::kF8E4M3: {
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_e4m3(x[i] / scale);
      return;
    }
    case DType::kF8E5M2: {
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_e5m2(x[i] / scale);
      return;
    }
    case DType::kI8: {
      auto* d = static_cast<int8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        // nearbyint rounds half to even in the default rounding mode; NaN becomes 0.
        const float q = std::clamp(x[i] / scale, -127.0f, 127.0f);
        d[i] = std::isnan(q) ? int8_t{0} : static_cast<int8_t>(std::nearbyint(q));
      }
      return;
    }
    default:
      break;
  }
}

void dequantize_kv_row(const void* src, int64_t n, DType dtype, float scale, float* dst) {
  switch (dtype) {
    case DType::kF32: {
      const auto* s = static_cast<const float*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i] * scale;
      return;
    }
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]) * scale;
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(s[i]) * scale;
      return;
    }
    case DType::kF8E4M3:
    case DType::kF8E5M2: {
      const auto& table = dtype == DType::kF8E4M3 ? fp8_tables().e4m3 : fp8_tables().e5m2;
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = table[s[i]] * scale;
      return;
    }
    case DType::kI8: {
      const auto* s = static_cast<const int8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]) * scale;
      return;
    }
    default:
      break;
  }
}

}  // namespace pagoda::cpu
