#pragma once
// Tensor: a non-owning, typed, row-major view of memory. Buffer: the owner of an aligned host
// allocation. Kernels never see either; ops unwrap them into raw pointers and sizes.
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace pagoda {

/// The shape of a tensor, at most kMaxDims dimensions, row-major.
class Shape {
 public:
  static constexpr int kMaxDims = 4;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  [[nodiscard]] int64_t num_elements() const;
  [[nodiscard]] std::string to_string() const;  // "[4096, 128]"
  bool operator==(const Shape& other) const;

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

/// Where a tensor's memory lives.
enum class Device : uint8_t { kCPU, kCUDA };

/// A non-owning view: pointer, dtype, shape and device. Contiguous, row-major.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  Device device = Device::kCPU;

  [[nodiscard]] int64_t num_elements() const { return shape.num_elements(); }
  [[nodiscard]] size_t num_bytes() const {
    return static_cast<size_t>(num_elements()) * dtype_size(dtype);
  }
  template <typename T>
  [[nodiscard]] T* as() const {
    return static_cast<T*>(data);
  }
};

/// Owner of a 64-byte aligned host allocation (cache line and AVX-512 friendly).
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t num_bytes);
  [[nodiscard]] void* data() const { return data_.get(); }
  [[nodiscard]] size_t size() const { return size_; }
  template <typename T>
  [[nodiscard]] T* as() const {
    return static_cast<T*>(data_.get());
  }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  size_t size_ = 0;
};

}  // namespace pagoda
