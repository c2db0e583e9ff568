#pragma once
// The n-gram (prompt lookup) proposer of speculative decoding: a request's next tokens are
// guessed by finding its last n tokens earlier in its own prompt and output and copying what
// followed them there.
//
// How it works. Each completion owns an NgramIndex: a hash map from (n, the n tokens) to the end
// of their most recent occurrence, for every n in [min_n, max_n]. A request's tokens only grow
// (prompt, then one or more sampled tokens per step), so each call indexes only the positions
// added since the last one: O((new tokens) x max_n) per step, never a rescan of the history.
// propose() tries n = max_n down to min_n and takes the first n whose suffix occurred before;
// the drafts are the k tokens after that occurrence. Where those run past the last token, the
// copy goes on from its own start (the text between the occurrence and the end repeats), so a
// period shorter than k still gives k drafts.
//
// Worked example (min_n 1, max_n 2, k 3), tokens [5 6 7 5 6] at positions 0..4:
//   n = 2: the suffix (5 6) ended at position 2 (exclusive) before: drafts tokens[2..] = [7 5 6].
// Tokens [8 1 1 1], k 3: n = 2: (1 1) occurred ending at 3 (positions 1..2, overlapping the
// suffix's own tokens; the most recent earlier occurrence): drafts start at position 3: [1], then
// the copy repeats from position 3: [1 1 1].
// A hash collision cannot give wrong drafts: each hit is compared token by token (and drafts are
// only proposals: the step's verification decides what is kept).
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace pagoda {

/// One completion's n-gram index over its tokens (prompt + output).
class NgramIndex {
 public:
  /// min_n <= max_n, both >= 1 (checked).
  NgramIndex(int min_n, int max_n);

  /// Up to k drafts after `tokens` (the completion's prompt and output so far; each call's
  /// tokens extend the previous call's): empty when no suffix of min_n..max_n tokens occurred
  /// before. Memory: one map entry per (position, n).
  [[nodiscard]] std::vector<int32_t> propose(std::span<const int32_t> tokens, int k);

 private:
  /// Indexes the n-grams that end at positions [indexed_, end) (exclusive ends).
  void index_until(std::span<const int32_t> tokens, size_t end);
  [[nodiscard]] static uint64_t key(std::span<const int32_t> gram);

  int min_n_, max_n_;
  size_t indexed_ = 0;                               // n-grams ending before it are indexed
  std::unordered_map<uint64_t, uint32_t> last_end_;  // key(n-gram) -> its last exclusive end
};

}  // namespace pagoda
