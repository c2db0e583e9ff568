#include "structured/vocabulary.h"

#include <algorithm>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::structured {

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, int32_t size,
                       std::vector<int32_t> eos_ids)
    : size_(size), eos_ids_(std::move(eos_ids)) {
  PAGODA_CHECK(size >= static_cast<int32_t>(token_bytes.size()), "vocabulary size {} < {} tokens",
               size, token_bytes.size());
  std::sort(eos_ids_.begin(), eos_ids_.end());
  eos_ids_.erase(std::unique(eos_ids_.begin(), eos_ids_.end()), eos_ids_.end());
  std::erase_if(eos_ids_, [&](int32_t id) { return id < 0 || id >= size; });
  offsets_.assign(static_cast<size_t>(size) + 1, 0);
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t x) { h = (h ^ x) * 1099511628211ull; };
  for (int32_t id = 0; id < size; ++id) {
    const bool is_eos = std::binary_search(eos_ids_.begin(), eos_ids_.end(), id);
    if (id < static_cast<int32_t>(token_bytes.size()) && !is_eos) {
      const std::string& b = token_bytes[static_cast<size_t>(id)];
      data_ += b;
      if (!b.empty()) sorted_.push_back(id);
      max_token_bytes_ = std::max(max_token_bytes_, static_cast<int32_t>(b.size()));
      for (char c : b) mix(static_cast<uint8_t>(c));
    }
    mix(0x100 + static_cast<uint64_t>(data_.size()));
    offsets_[static_cast<size_t>(id) + 1] = static_cast<uint32_t>(data_.size());
  }
  for (int32_t id : eos_ids_) mix(0x10000 + static_cast<uint64_t>(id));
  mix(static_cast<uint64_t>(size));
  fingerprint_ = h;
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes(a) < bytes(b) || (bytes(a) == bytes(b) && a < b);
  });
  lcp_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string_view a = bytes(sorted_[i - 1]), b = bytes(sorted_[i]);
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    lcp_[i] = static_cast<int32_t>(k);
  }
  for (int b = 0, i = 0; b <= 256; ++b) {
    while (static_cast<size_t>(i) < sorted_.size() &&
           static_cast<uint8_t>(bytes(sorted_[static_cast<size_t>(i)])[0]) < b) {
      ++i;
    }
    first_byte_begin_[static_cast<size_t>(b)] = static_cast<size_t>(i);
  }
  first_byte_begin_[256] = sorted_.size();
  // The trie, breadth-first: each node's children are found by scanning its range at depth d.
  trie_.push_back(TrieNode{0, static_cast<int32_t>(sorted_.size()), 0, 0, 0, 0});
  std::vector<int32_t> depth{0};
  for (size_t n = 0; n < trie_.size(); ++n) {
    const TrieNode node = trie_[n];
    const auto d = static_cast<size_t>(depth[n]);
    auto i = static_cast<size_t>(node.begin);
    while (i < static_cast<size_t>(node.end) && bytes(sorted_[i]).size() == d) ++i;
    trie_[n].num_here = static_cast<int32_t>(i) - node.begin;
    trie_[n].first_child = static_cast<int32_t>(trie_.size());
    while (i < static_cast<size_t>(node.end)) {
      size_t j = i + 1;
      while (j < static_cast<size_t>(node.end) && static_cast<size_t>(lcp_[j]) > d) ++j;
      trie_.push_back(TrieNode{static_cast<int32_t>(i), static_cast<int32_t>(j), 0, 0, 0,
                               static_cast<uint8_t>(bytes(sorted_[i])[d])});
      depth.push_back(static_cast<int32_t>(d + 1));
      i = j;
    }
    trie_[n].num_children = static_cast<int32_t>(trie_.size()) - trie_[n].first_child;
  }
  lcp_min_.push_back(lcp_);
  for (size_t span = 1; span * 2 <= lcp_.size(); span *= 2) {
    const std::vector<int32_t>& prev = lcp_min_.back();
    std::vector<int32_t> next(lcp_.size() - span * 2 + 1);
    for (size_t i = 0; i < next.size(); ++i) next[i] = std::min(prev[i], prev[i + span]);
    lcp_min_.push_back(std::move(next));
  }
}

size_t Vocabulary::skip_prefix(size_t i, int32_t depth) const {
  // Tokens i+1, i+2, ... share the prefix while their lcp with the previous one is >= depth:
  // jump over blocks of 2^k whose minimum lcp is >= depth, largest first.
  size_t pos = i + 1;
  for (size_t k = lcp_min_.size(); k-- > 0;) {
    const std::vector<int32_t>& level = lcp_min_[k];
    if (pos < level.size() && level[pos] >= depth) pos += size_t{1} << k;
  }
  return pos;
}

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const Tokenizer& tokenizer,
                                                             int32_t model_vocab_size,
                                                             std::span<const int32_t> eos_ids) {
  const int32_t n = std::min(tokenizer.vocab_size(), model_vocab_size);
  std::vector<std::string> bytes(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.is_special(id)) continue;
    bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  }
  return std::make_shared<const Vocabulary>(std::move(bytes), std::max(n, model_vocab_size),
                                            std::vector<int32_t>(eos_ids.begin(), eos_ids.end()));
}

}  // namespace pagoda::structured
