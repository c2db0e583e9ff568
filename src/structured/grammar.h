#pragma once
// The grammar every front end compiles to: named rules whose bodies are regular expressions over
// bytes and references to rules (an extended BNF, as GBNF writes it). Characters are UTF-8 byte
// sequences: a Unicode class becomes alternatives of byte-set sequences (utf8_ranges), so the
// automata and the matcher work on bytes only, which is what token strings are made of.
#include <array>
#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::structured {

using ByteSet = std::bitset<256>;

/// The largest Unicode scalar value.
inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

/// A deterministic byte automaton embedded in a rule body, for languages code builds more
/// easily as a machine than as an expression (text that avoids some strings). State 0 starts.
struct ByteDfa {
  std::vector<std::array<int32_t, 256>> next;  // [states][byte] -> state, -1: no edge
  std::vector<uint8_t> final;                  // [states]
};

/// A node of a rule body.
struct Expr {
  enum class Kind : uint8_t {
    kEmpty,   // matches the empty string
    kBytes,   // one byte of `bytes`
    kRef,     // the rule `rule`
    kSeq,     // children in order
    kAlt,     // one of children
    kRepeat,  // children[0] between min and max times (max < 0: unbounded)
    kDfa,     // a word of `dfa`
  };
  Kind kind = Kind::kEmpty;
  ByteSet bytes;
  int32_t rule = -1;
  int32_t min = 0, max = -1;
  std::shared_ptr<const std::vector<Expr>> parts;  // shared by copies: an Expr never changes
  std::shared_ptr<const ByteDfa> dfa;

  /// The sub-expressions of kSeq, kAlt and kRepeat (empty otherwise).
  [[nodiscard]] const std::vector<Expr>& children() const;
  /// A copy with other children (the same kind, bounds and fields).
  [[nodiscard]] Expr with_children(std::vector<Expr> children) const;

  [[nodiscard]] static Expr empty() { return {}; }
  [[nodiscard]] static Expr byte_set(const ByteSet& set);
  [[nodiscard]] static Expr byte(uint8_t b);
  [[nodiscard]] static Expr literal(std::string_view bytes);
  [[nodiscard]] static Expr ref(int32_t rule);
  [[nodiscard]] static Expr seq(std::vector<Expr> parts);
  [[nodiscard]] static Expr alt(std::vector<Expr> options);
  [[nodiscard]] static Expr repeat(Expr body, int32_t min, int32_t max);
  [[nodiscard]] static Expr star(Expr body) { return repeat(std::move(body), 0, -1); }
  [[nodiscard]] static Expr plus(Expr body) { return repeat(std::move(body), 1, -1); }
  [[nodiscard]] static Expr optional(Expr body) { return repeat(std::move(body), 0, 1); }
  [[nodiscard]] static Expr automaton(std::shared_ptr<const ByteDfa> dfa);
  /// One character of the union of [first, last] codepoint ranges (surrogates excluded), as
  /// UTF-8 byte sequences.
  [[nodiscard]] static Expr codepoints(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);
};

/// Sorted, merged, surrogate-free ranges; `negate` takes the complement within [0, 0x10FFFF].
[[nodiscard]] std::vector<std::pair<uint32_t, uint32_t>> normalize_ranges(
    std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate);

/// The byte-set sequences whose union is the UTF-8 encoding of the codepoints in [first, last]
/// (no surrogates inside): each inner vector is one sequence of 1 to 4 byte sets.
[[nodiscard]] std::vector<std::vector<ByteSet>> utf8_ranges(uint32_t first, uint32_t last);

/// Appends the UTF-8 encoding of cp.
void append_utf8(std::string& out, uint32_t cp);

/// One named rule.
struct Rule {
  std::string name;
  Expr body;
};

/// A grammar: rules and the one the text must match as a whole.
struct Grammar {
  std::vector<Rule> rules;
  int32_t root = -1;

  /// Adds a rule with an empty body and returns its index.
  int32_t add_rule(std::string name);
  /// The index of the rule called name, or -1.
  [[nodiscard]] int32_t find_rule(std::string_view name) const;
  /// The rules as GBNF-like text, for logs and tests (byte sets print as [\xHH] byte classes).
  [[nodiscard]] std::string to_gbnf() const;
};

}  // namespace pagoda::structured
