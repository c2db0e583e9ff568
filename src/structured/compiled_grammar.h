#pragma once
// A grammar compiled against one vocabulary: its automaton plus, for every state that scans
// bytes, which tokens that state accepts on its own.
//
// How it works (xgrammar's adaptive token mask cache, in our own form): a token starting at a
// scanning state either stays inside the state's rule (and its callees) until its last byte (then
// it is accepted whatever lies below on the stack), or dies there (rejected whatever lies below),
// or leaves the rule with bytes to spare (uncertain: only the frames below can tell). The first two
// are decided once per state by walking the sorted vocabulary from a stack holding only that
// state; a token that leaves the rule into a byte not in the rule's FOLLOW set is rejected too.
// At run time the mask of a position is the union of its frames' precomputed sets, and only the
// uncertain tokens are checked against the real stack below, grouped by the bytes that follow the
// return (their suffixes), each suffix checked once.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "structured/automaton.h"
#include "structured/vocabulary.h"

namespace pagoda {
class ThreadPool;
}

namespace pagoda::structured {

class StateCache;

/// The tokens one scanning state decides on its own, and the ones it cannot.
struct StateTokens {
  enum class Kind : uint8_t {
    kAcceptedList,  // ids: the accepted tokens
    kRejectedList,  // ids: the rejected tokens (every token neither accepted nor uncertain)
    kBitmask,       // bits: the accepted tokens
  };
  Kind kind = Kind::kAcceptedList;
  // The definite part, shared by the grammars whose states have the same form (StateCache).
  std::shared_ptr<const std::vector<int32_t>> ids;
  std::shared_ptr<const std::vector<uint32_t>> bits;  // [vocab.mask_words()]
  // Uncertain tokens: uncertain[i] leaves the rule after one of several prefixes; the bytes that
  // then follow are suffixes[suffix_ids[suffix_begin[i] .. suffix_begin[i + 1])].
  std::vector<int32_t> uncertain;
  std::vector<int32_t> suffix_begin;
  std::vector<int32_t> suffix_ids;
  std::vector<std::string> suffixes;
  int32_t num_accepted = 0;

  /// This state's tokens where only bytes in `follow` may come after its rule: uncertain tokens
  /// keep the suffixes that start with such a byte (tokens left with none stay listed, with no
  /// suffix, so that a rejected-list mask still clears them). The definite part is shared.
  [[nodiscard]] StateTokens restricted(const ByteSet& follow) const;
};

/// Compilation statistics (for logs and benchmarks).
struct CompileStats {
  int32_t num_states = 0;
  int32_t num_scanning_states = 0;
  int64_t num_uncertain = 0;      // uncertain (state, token) pairs
  int32_t num_cached_states = 0;  // scanning states whose tokens came from the StateCache
  double automaton_seconds = 0;
  double masks_seconds = 0;
};

/// Immutable; shared by every matcher of every request with the same constraint.
struct CompiledGrammar {
  Automaton automaton;
  std::shared_ptr<const Vocabulary> vocab;
  std::vector<StateTokens> states;  // [num_states] (empty for states that do not scan)
  CompileStats stats;
};

/// Builds the automaton of g and the token sets of its scanning states (in parallel on pool when
/// given; shared through cache, which must belong to this vocabulary, when given). Throws
/// InvalidArgument as build_automaton does.
[[nodiscard]] std::shared_ptr<const CompiledGrammar> compile_grammar(
    const Grammar& g, std::shared_ptr<const Vocabulary> vocab, ThreadPool* pool = nullptr,
    StateCache* cache = nullptr);

}  // namespace pagoda::structured
