#pragma once
// A grammar compiled for matching: every rule becomes a minimal deterministic automaton whose
// edges are byte classes or calls of other rules (a recursive transition network). A matcher
// state is then a stack of automaton states, and a rule's repetitions are loops inside its own
// automaton instead of nested calls.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "structured/grammar.h"

namespace pagoda::structured {

/// One call edge: enter `rule`; when it completes, continue at `ret`.
struct Call {
  int32_t rule = 0;
  int32_t ret = 0;
  bool tail = false;  // ret is final with no edges: no return frame is needed
};

/// The compiled automata of a grammar. States are numbered across all rules.
struct Automaton {
  enum Flags : uint8_t {
    kFinal = 1,  // the state's rule may end here
    kScans = 2,  // the state has byte edges
    kCalls = 4,  // the state has call edges
  };

  int32_t root = 0;
  int32_t num_classes = 0;
  std::array<uint8_t, 256> byte_class{};  // byte -> its class (bytes no set tells apart share one)
  std::vector<ByteSet> class_bytes;       // [num_classes]
  std::vector<std::string> rule_names;    // [num_rules]
  std::vector<int32_t> rule_start;        // [num_rules]
  std::vector<int32_t> rule_of;           // [num_states]
  std::vector<uint8_t> flags;             // [num_states]
  std::vector<int32_t> next;              // [num_states, num_classes] target state or -1
  std::vector<int32_t> call_begin;        // [num_states + 1] into calls
  std::vector<Call> calls;
  std::vector<ByteSet> follow;  // [num_rules] bytes that may come right after the rule ends

  [[nodiscard]] int32_t num_states() const { return static_cast<int32_t>(rule_of.size()); }
  [[nodiscard]] int32_t step(int32_t state, uint8_t byte) const {
    return next[static_cast<size_t>(state) * static_cast<size_t>(num_classes) + byte_class[byte]];
  }
  [[nodiscard]] bool final(int32_t s) const {
    return (flags[static_cast<size_t>(s)] & kFinal) != 0;
  }
  [[nodiscard]] bool scans(int32_t s) const {
    return (flags[static_cast<size_t>(s)] & kScans) != 0;
  }
  [[nodiscard]] bool calls_out(int32_t s) const {
    return (flags[static_cast<size_t>(s)] & kCalls) != 0;
  }
  /// Bytes with an edge out of s.
  [[nodiscard]] ByteSet scan_bytes(int32_t s) const;
};

/// Limits of compilation (a grammar past them is refused, not truncated).
struct AutomatonLimits {
  int64_t max_nfa_nodes = 2'000'000;
  int64_t max_states = 300'000;
};

/// Compiles g. Throws InvalidArgument naming the rules for left recursion (a rule that can call
/// itself before consuming a byte), for a grammar that matches no text, and for one past limits.
/// Rule edges that can never lead to the end of the text are removed.
[[nodiscard]] Automaton build_automaton(const Grammar& g, const AutomatonLimits& limits = {});

}  // namespace pagoda::structured
