#pragma once
// Token sets of scanning states shared across the grammars compiled for one vocabulary.
//
// How it works: the token set of a state depends only on the part of the automaton reachable from
// it (byte edges, calls, returns) and on its rule's FOLLOW set. When that part is small (a JSON
// string, a number, a pattern: the primitive rules every schema shares), it is written in a
// canonical form independent of state and rule numbering, and equal forms share one result. A
// schema compiled after another then pays only for its own structure.
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "structured/automaton.h"

namespace pagoda::structured {

struct StateTokens;

/// The canonical form of what state reaches (its rule's FOLLOW set excluded: cached token sets are
/// computed for any following byte and restricted per grammar), or nullopt when it reaches more
/// than max_states states or a state with more than one call (no canonical order then).
[[nodiscard]] std::optional<std::vector<uint64_t>> canonical_form(const Automaton& a, int32_t state,
                                                                  size_t max_states = 128);

/// The canonical form of a rule without calls (its whole automaton from its start; the rule's
/// FOLLOW set excluded), or nullopt when the rule calls others. local[s] receives each state's
/// number in the form (sized to the automaton; other rules' states are left alone). A state of
/// such a rule is identified by (the rule's form, its number), whatever the rule's size.
[[nodiscard]] std::optional<std::vector<uint64_t>> rule_form(const Automaton& a, int32_t rule,
                                                             std::vector<int32_t>& local);

/// Thread-safe; keeps at most `capacity` entries (later ones are not kept).
class StateCache {
 public:
  explicit StateCache(size_t capacity = 65536) : capacity_(capacity) {}
  /// A number for a rule form, equal for equal forms (for state keys {number, local state}).
  [[nodiscard]] uint64_t rule_number(const std::vector<uint64_t>& form);
  [[nodiscard]] std::shared_ptr<const StateTokens> find(const std::vector<uint64_t>& form) const;
  void insert(std::vector<uint64_t> form, std::shared_ptr<const StateTokens> tokens);
  [[nodiscard]] size_t size() const;

 private:
  struct Hash {
    size_t operator()(const std::vector<uint64_t>& v) const;
  };
  size_t capacity_;
  mutable std::mutex mutex_;
  std::unordered_map<std::vector<uint64_t>, std::shared_ptr<const StateTokens>, Hash> entries_;
  std::unordered_map<std::vector<uint64_t>, uint64_t, Hash> rules_;
};

}  // namespace pagoda::structured
