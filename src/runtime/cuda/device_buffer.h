#pragma once
// RAII device memory and the error check of the GPU runtime (host code: exceptions, not codes).
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "core/status.h"

namespace pagoda {

/// Throws Internal naming the call's place when a CUDA call fails.
#define PAGODA_CUDA_CHECK(expr)                                                                 \
  do {                                                                                          \
    const cudaError_t pagoda_cuda_err_ = (expr);                                                \
    if (pagoda_cuda_err_ != cudaSuccess) {                                                      \
      throw ::pagoda::Internal(::fmt::format("{}:{}: {} failed: {}", __FILE__, __LINE__, #expr, \
                                             cudaGetErrorString(pagoda_cuda_err_)));            \
    }                                                                                           \
  } while (0)

/// An owned cudaMalloc allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) PAGODA_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  [[nodiscard]] void* get() const { return ptr_; }
  [[nodiscard]] size_t size() const { return bytes_; }
  template <typename T>
  [[nodiscard]] T* as() const {
    return static_cast<T*>(ptr_);
  }
  /// Offset view in bytes.
  [[nodiscard]] void* at(size_t byte_offset) const {
    return static_cast<char*>(ptr_) + byte_offset;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace pagoda
