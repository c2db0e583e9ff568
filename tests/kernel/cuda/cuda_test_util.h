#pragma once
// Helpers of the CUDA kernel tests: a device buffer, 16-bit host data with its exact fp32 values,
// poisoning, and the normalised error bound max|got - ref| / max|ref|.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace pagoda::cuda::testing {

/// Fails the test with the CUDA error's name and the failing expression.
#define CUDA_OK(expr)                                                               \
  do {                                                                              \
    const cudaError_t err_ = (expr);                                                \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorName(err_) << " (" \
                                 << cudaGetErrorString(err_) << ")";                \
  } while (0)

/// Every test starts here: without a device the test fails with a clear message (these tests run
/// only under the `gpu` ctest label, on the device machine).
#define REQUIRE_GPU()                                                                        \
  do {                                                                                       \
    int count_ = 0;                                                                          \
    const cudaError_t err_ = cudaGetDeviceCount(&count_);                                    \
    ASSERT_TRUE(err_ == cudaSuccess && count_ > 0)                                           \
        << "No CUDA device (" << cudaGetErrorString(err_)                                    \
        << "): kernels_cuda_test needs a GPU; run it on the device machine (ctest -L gpu)."; \
  } while (0)

/// Owns device memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  [[nodiscard]] void* get() const { return ptr_; }
  template <typename U>
  [[nodiscard]] U* as() const {
    return static_cast<U*>(ptr_);
  }
  [[nodiscard]] size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// A device copy of a host vector.
template <typename U>
DeviceBuffer to_device(const std::vector<U>& host) {
  DeviceBuffer b(std::max<size_t>(1, host.size() * sizeof(U)));
  if (b.get() && !host.empty())
    cudaMemcpy(b.get(), host.data(), host.size() * sizeof(U), cudaMemcpyHostToDevice);
  return b;
}

template <typename U>
std::vector<U> to_host(const DeviceBuffer& b, size_t count) {
  std::vector<U> out(count);
  if (count > 0) cudaMemcpy(out.data(), b.get(), count * sizeof(U), cudaMemcpyDeviceToHost);
  return out;
}

/// 0xffff is NaN in both bf16 and f16: an element the kernel never wrote reads back as NaN.
inline void poison(const DeviceBuffer& b) { cudaMemset(b.get(), 0xff, b.bytes()); }

inline float half_to_float(uint16_t h, DType dt) {
  return dt == DType::kBF16 ? bf16_to_float(h) : f16_to_float(h);
}
inline uint16_t float_to_half(float f, DType dt) {
  return dt == DType::kBF16 ? float_to_bf16(f) : float_to_f16(f);
}

/// Random 16-bit values, never zeros (uniform in [lo, hi), |x| >= 1e-3), and their fp32 values.
struct HalfData {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};

inline HalfData random_half(size_t count, DType dt, uint32_t seed, float lo = -1.0f,
                            float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  HalfData d;
  d.bits.resize(count);
  d.values.resize(count);
  for (size_t i = 0; i < count; ++i) {
    float v = dist(gen);
    if (std::abs(v) < 1e-3f) v = 1e-3f;
    d.bits[i] = float_to_half(v, dt);
    d.values[i] = half_to_float(d.bits[i], dt);
  }
  return d;
}

inline std::vector<float> halves_to_floats(const std::vector<uint16_t>& bits, DType dt) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = half_to_float(bits[i], dt);
  return out;
}

/// max |got - ref| / max |ref|; infinity when any element is NaN (unwritten or broken).
inline double normalised_error(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i]) || std::isinf(got[i])) return INFINITY;
    max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i]) - ref[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i])));
  }
  return max_ref > 0.0 ? max_diff / max_ref : max_diff;
}

/// The bound for outputs stored in dtype from fp32 arithmetic: bf16 keeps 8 bits (2^-9 relative
/// rounding), f16 11 bits; the rest of the budget is accumulation-order differences.
inline double tolerance(DType dt) { return dt == DType::kBF16 ? 1e-2 : 2e-3; }

inline const char* dtype_label(DType dt) { return dt == DType::kBF16 ? "bf16" : "f16"; }

}  // namespace pagoda::cuda::testing
