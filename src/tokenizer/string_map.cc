#include "tokenizer/string_map.h"

#include <bit>

namespace pagoda {

void PairMap::reserve(size_t count) {
  size_t capacity = 16;
  while (capacity < count * 2) capacity *= 2;
  if (capacity <= keys_.size()) return;
  std::vector<uint64_t> old_keys = std::move(keys_);
  std::vector<MergeResult> old_values = std::move(values_);
  keys_.assign(capacity, kEmpty);
  values_.assign(capacity, MergeResult{0, 0});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
  for (size_t i = 0; i < old_keys.size(); ++i) {
    if (old_keys[i] == kEmpty) continue;
    size_t s = slot(old_keys[i]);
    while (keys_[s] != kEmpty) s = (s + 1) & mask_;
    keys_[s] = old_keys[i];
    values_[s] = old_values[i];
  }
}

void PairMap::grow() { reserve(keys_.empty() ? 8 : keys_.size()); }

void PairMap::insert(int32_t a, int32_t b, MergeResult value) {
  if ((size_ + 1) * 2 > keys_.size()) grow();
  const uint64_t key = pack(a, b);
  size_t s = slot(key);
  while (keys_[s] != kEmpty) {
    if (keys_[s] == key) {
      values_[s] = value;
      return;
    }
    s = (s + 1) & mask_;
  }
  keys_[s] = key;
  values_[s] = value;
  ++size_;
}

}  // namespace pagoda
