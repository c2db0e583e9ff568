#pragma once
// The byte form of the step contract (runtime/step.h) and of what a worker reports, for the
// process executor's socket. Little-endian PODs and length-prefixed arrays; a reader that runs
// past its bytes throws, so a truncated or corrupt message fails its step instead of running a
// wrong one. Logits and hidden states do not travel here: the worker leaves them in shared memory
// and the message carries their counts.
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runtime/executor.h"
#include "runtime/step.h"

namespace pagoda::codec {

/// Appends values to a byte string.
class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const char*>(&v);
    bytes_.append(p, sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  /// Pairs (std::pair is not trivially copyable), as two fields each.
  template <typename A, typename B>
  void put_pair_vector(const std::vector<std::pair<A, B>>& v) {
    put<uint64_t>(v.size());
    for (const auto& [a, b] : v) {
      put(a);
      put(b);
    }
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_.append(s);
  }
  [[nodiscard]] std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

/// Reads values back; Internal when a read runs past the end.
class Reader {
 public:
  Reader(const char* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  [[nodiscard]] T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  template <typename T>
  [[nodiscard]] std::vector<T> get_vector() {
    const auto n = get<uint64_t>();
    PAGODA_CHECK(n <= (size_ - pos_) / sizeof(T), "codec: array of {} past the message", n);
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), take(n * sizeof(T)), n * sizeof(T));
    return v;
  }
  template <typename A, typename B>
  [[nodiscard]] std::vector<std::pair<A, B>> get_pair_vector() {
    const auto n = get<uint64_t>();
    PAGODA_CHECK(n <= (size_ - pos_) / (sizeof(A) + sizeof(B)), "codec: array of {} past the end",
                 n);
    std::vector<std::pair<A, B>> v;
    v.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
      const A a = get<A>();
      const B b = get<B>();
      v.emplace_back(a, b);
    }
    return v;
  }
  [[nodiscard]] std::string get_string() {
    const auto n = get<uint64_t>();
    PAGODA_CHECK(n <= size_ - pos_, "codec: string of {} past the message", n);
    return std::string(take(n), n);
  }
  [[nodiscard]] bool done() const { return pos_ == size_; }

 private:
  const char* take(size_t n) {
    PAGODA_CHECK(n <= size_ - pos_, "codec: read of {} bytes past the message end", n);
    const char* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

void write_plan(Writer& w, const StepPlan& plan);
[[nodiscard]] StepPlan read_plan(Reader& r);

/// A result without its spans (logits and hidden states travel in shared memory): the sequences,
/// the vocabulary and the element counts of the two spans.
void write_result(Writer& w, const StepResult& result);
struct ResultHeader {
  StepResult result;  // spans empty
  uint64_t logits_elems = 0;
  uint64_t hidden_elems = 0;
};
[[nodiscard]] ResultHeader read_result(Reader& r);

void write_info(Writer& w, const ExecutorInfo& info);
[[nodiscard]] ExecutorInfo read_info(Reader& r);

}  // namespace pagoda::codec
