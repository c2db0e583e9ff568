#include "engine/ngram_proposer.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda {
namespace {

// The key of an n-gram is built from its last token backwards, so that the keys of the n-grams
// ending at one position (n = 1, 2, ...) come one from the other: step() adds the token before,
// finish() mixes in n.
constexpr uint64_t kStart = 0x9e3779b97f4a7c15ull;

uint64_t step(uint64_t h, int32_t token) {
  return (h ^ static_cast<uint32_t>(token)) * 0x100000001b3ull + 0x7f4a7c159e3779b9ull;
}

uint64_t finish(uint64_t h, size_t n) {
  uint64_t x = h + 0xbf58476d1ce4e5b9ull * static_cast<uint64_t>(n);  // splitmix64's finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

NgramIndex::NgramIndex(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {
  PAGODA_CHECK(min_n >= 1 && min_n <= max_n, "n-gram sizes [{}, {}]", min_n, max_n);
}

uint64_t NgramIndex::key(std::span<const int32_t> gram) {
  uint64_t h = kStart;
  for (size_t i = gram.size(); i-- > 0;) h = step(h, gram[i]);
  return finish(h, gram.size());
}

void NgramIndex::index_until(std::span<const int32_t> tokens, size_t end) {
  // Example (min_n 2, max_n 3): the n-grams ending at e = 4 (exclusive) are tokens[2..4) and
  // tokens[1..4); their keys come from one backward walk over tokens[3], tokens[2], tokens[1].
  for (size_t e = indexed_; e < end; ++e) {
    uint64_t h = kStart;
    for (size_t n = 1; n <= static_cast<size_t>(max_n_) && n <= e; ++n) {
      h = step(h, tokens[e - n]);
      if (n >= static_cast<size_t>(min_n_)) last_end_[finish(h, n)] = static_cast<uint32_t>(e);
    }
  }
  indexed_ = std::max(indexed_, end);
}

std::vector<int32_t> NgramIndex::propose(std::span<const int32_t> tokens, int k) {
  std::vector<int32_t> drafts;
  const size_t len = tokens.size();
  if (k <= 0 || len < static_cast<size_t>(min_n_) + 1) return drafts;
  if (len < indexed_) {  // not an extension of the last call's tokens: start over
    last_end_.clear();
    indexed_ = 0;
  }
  // Earlier occurrences end (exclusive) at len - 1 at the latest; the suffix itself ends at len.
  index_until(tokens, len);
  for (int n = std::min<int>(max_n_, static_cast<int>(len) - 1); n >= min_n_; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(len - static_cast<size_t>(n));
    const auto it = last_end_.find(key(suffix));
    if (it == last_end_.end()) continue;
    const size_t e = it->second;  // the occurrence is tokens[e - n, e), e < len
    if (e < static_cast<size_t>(n) ||
        !std::equal(suffix.begin(), suffix.end(),
                    tokens.begin() + static_cast<std::ptrdiff_t>(e - static_cast<size_t>(n)))) {
      continue;  // a hash collision, or tokens that changed under the index
    }
    // Position p of the copy is tokens[p] before the end and the copy's own drafts[p - len] after:
    // tokens [8 1 1 1] with e = 3 give [tokens[3], drafts[0], drafts[1]].
    for (size_t p = e; drafts.size() < static_cast<size_t>(k); ++p)
      drafts.push_back(p < len ? tokens[p] : drafts[p - len]);
    break;
  }
  return drafts;
}

}  // namespace pagoda
