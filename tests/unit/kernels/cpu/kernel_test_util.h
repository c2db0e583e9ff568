#pragma once
// Shared helpers of the CPU kernel tests: seeded random data and the normalised error bound.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace pagoda::cpu::testing {

/// Uniform floats in [lo, hi) from a fixed-seed generator; callers pass their own seed so that
/// every case is reproducible on its own.
inline std::vector<float> random_floats(size_t count, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(count);
  for (auto& v : out) v = dist(gen);
  return out;
}

/// Weights in one of the float weight dtypes, stored as raw bytes, plus their exact fp32 values.
struct Weights {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // value of each element after rounding to the dtype
};

inline Weights make_weights(size_t count, DType dtype, uint32_t seed, float scale = 1.0f) {
  Weights w;
  w.values = random_floats(count, seed, -scale, scale);
  w.bytes.resize(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(w.bytes.data())[i] = w.values[i];
    } else {
      auto* h = reinterpret_cast<uint16_t*>(w.bytes.data());
      h[i] = dtype == DType::kBF16 ? float_to_bf16(w.values[i]) : float_to_f16(w.values[i]);
      w.values[i] = dtype == DType::kBF16 ? bf16_to_float(h[i]) : f16_to_float(h[i]);
    }
  }
  return w;
}

/// max |got - ref| / max |ref|: scale-free, so one tolerance fits inputs of any magnitude.
inline double normalised_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i]) - ref[i]));
    max_ref = std::max(max_ref, std::abs(ref[i]));
  }
  return max_ref > 0.0 ? max_diff / max_ref : max_diff;
}

}  // namespace pagoda::cpu::testing
