#pragma once
// One request's walk through a compiled grammar: it accepts the sampled tokens and writes the
// bitmask of the tokens allowed next (see compiled_grammar.h for how a mask is made).
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/stack_arena.h"

namespace pagoda::structured {

/// Not thread-safe: one thread at a time per matcher. Copies are independent (n > 1 forks).
class GrammarMatcher {
 public:
  /// cache_masks: keep the last few masks by position (off only to measure the computation).
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, bool cache_masks = true);

  /// Advances by one token. An end-of-text id (the vocabulary's eos_ids) is allowed when the
  /// text may end here and terminates the matcher. Returns false, changing nothing, for a token
  /// the grammar does not allow.
  [[nodiscard]] bool accept_token(int32_t id);
  /// Advances by raw bytes; false, changing nothing, when they are not allowed.
  [[nodiscard]] bool accept_bytes(std::string_view bytes);
  /// Whether accept_bytes(bytes) would succeed (changes nothing; the byte-level reference the
  /// masks are tested against).
  [[nodiscard]] bool can_accept_bytes(std::string_view bytes);
  /// Writes the tokens allowed next into mask [vocab().mask_words()]: bit (id % 32) of word
  /// (id / 32). End-of-text ids are set when the text may end (and only they once terminated).
  void fill_mask(std::span<uint32_t> mask);

  /// The bytes the grammar forces next: while exactly one byte may follow and the text may not
  /// end, that byte; at most max_bytes of them (changes nothing). Empty when there is a choice.
  /// Example: after `{` under the schema {"properties": {"name": ...}, "required": ["name"]}
  /// with no whitespace allowed, `"name":` is forced.
  [[nodiscard]] std::string forced_bytes(size_t max_bytes);

  /// The text so far is complete: end-of-text may come next.
  [[nodiscard]] bool can_end() const { return terminated_ || pos_.ended; }
  /// Complete, and no byte may follow: only end-of-text.
  [[nodiscard]] bool completed() const {
    return terminated_ || (pos_.ended && pos_.frames.empty());
  }
  /// End-of-text was accepted.
  [[nodiscard]] bool terminated() const { return terminated_; }
  [[nodiscard]] const Vocabulary& vocab() const { return *grammar_->vocab; }
  [[nodiscard]] const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  void compute_mask(std::span<uint32_t> mask);
  void add_state(const Frame& f, std::span<uint32_t> mask);

  std::shared_ptr<const CompiledGrammar> grammar_;
  StackArena arena_;
  Position pos_;
  bool terminated_ = false;
  Position scratch_[2];
  std::vector<uint32_t> temp_;
  // The last masks computed, by position (a string's content repeats one position for many steps).
  struct CachedMask {
    Position position;
    std::vector<uint32_t> mask;
    uint64_t used = 0;
  };
  std::array<CachedMask, 4> cache_;
  bool cache_masks_ = true;
  uint64_t clock_ = 0;
};

}  // namespace pagoda::structured
