#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

namespace pagoda {

Shape::Shape(std::initializer_list<int64_t> dims) {
  PAGODA_CHECK(dims.size() <= kMaxDims, "rank {} > {}", dims.size(), kMaxDims);
  for (int64_t d : dims) dims_[static_cast<size_t>(rank_++)] = d;
}

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return s + "]";
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[static_cast<size_t>(i)] != other.dims_[static_cast<size_t>(i)]) return false;
  }
  return true;
}

Buffer::Buffer(size_t num_bytes) : size_(num_bytes) {
  if (num_bytes == 0) return;
  const size_t rounded = (num_bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(p);
}

void Buffer::Free::operator()(void* p) const { std::free(p); }

}  // namespace pagoda
