#include "structured/grammar.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/status.h"
#include "tokenizer/utf8.h"

namespace pagoda::structured {

Expr Expr::byte_set(const ByteSet& set) {
  Expr e;
  e.kind = Kind::kBytes;
  e.bytes = set;
  return e;
}

Expr Expr::byte(uint8_t b) {
  ByteSet set;
  set.set(b);
  return byte_set(set);
}

Expr Expr::literal(std::string_view bytes) {
  if (bytes.size() == 1) return byte(static_cast<uint8_t>(bytes[0]));
  std::vector<Expr> parts;
  parts.reserve(bytes.size());
  for (char c : bytes) parts.push_back(byte(static_cast<uint8_t>(c)));
  return seq(std::move(parts));
}

Expr Expr::ref(int32_t rule) {
  Expr e;
  e.kind = Kind::kRef;
  e.rule = rule;
  return e;
}

Expr Expr::automaton(std::shared_ptr<const ByteDfa> dfa) {
  PAGODA_CHECK(dfa && !dfa->next.empty(), "an empty byte automaton");
  Expr e;
  e.kind = Kind::kDfa;
  e.dfa = std::move(dfa);
  return e;
}

const std::vector<Expr>& Expr::children() const {
  static const std::vector<Expr> kNone;
  return parts ? *parts : kNone;
}

Expr Expr::with_children(std::vector<Expr> children) const {
  Expr e = *this;
  e.parts = std::make_shared<const std::vector<Expr>>(std::move(children));
  return e;
}

Expr Expr::seq(std::vector<Expr> parts) {
  // Drops empties (nested sequences stay nested: flattening them would copy long tails again
  // and again as builders nest them).
  std::erase_if(parts, [](const Expr& p) { return p.kind == Kind::kEmpty; });
  if (parts.empty()) return empty();
  if (parts.size() == 1) return std::move(parts[0]);
  Expr e;
  e.kind = Kind::kSeq;
  e.parts = std::make_shared<const std::vector<Expr>>(std::move(parts));
  return e;
}

Expr Expr::alt(std::vector<Expr> options) {
  PAGODA_CHECK(!options.empty(), "an alternation needs an option");
  if (options.size() == 1) return std::move(options[0]);
  Expr e;
  e.kind = Kind::kAlt;
  e.parts = std::make_shared<const std::vector<Expr>>(std::move(options));
  return e;
}

Expr Expr::repeat(Expr body, int32_t min, int32_t max) {
  PAGODA_CHECK(min >= 0 && (max < 0 || max >= min), "repeat {{{},{}}}", min, max);
  if (max == 1 && min == 1) return body;
  if (max == 0 || body.kind == Kind::kEmpty) return empty();
  Expr e;
  e.kind = Kind::kRepeat;
  e.min = min;
  e.max = max;
  e.parts = std::make_shared<const std::vector<Expr>>(std::vector<Expr>{std::move(body)});
  return e;
}

std::vector<std::pair<uint32_t, uint32_t>> normalize_ranges(
    std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate) {
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  std::sort(ranges.begin(), ranges.end());
  for (auto [a, b] : ranges) {
    b = std::min(b, kMaxCodepoint);
    if (a > b) continue;
    if (!merged.empty() && a <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, b);
    } else {
      merged.emplace_back(a, b);
    }
  }
  if (negate) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    uint32_t next = 0;
    for (auto [a, b] : merged) {
      if (a > next) out.emplace_back(next, a - 1);
      next = b + 1;
    }
    if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
    merged = std::move(out);
  }
  // Surrogates have no UTF-8 encoding: cut them out.
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (auto [a, b] : merged) {
    if (b < 0xD800 || a > 0xDFFF) {
      out.emplace_back(a, b);
      continue;
    }
    if (a < 0xD800) out.emplace_back(a, 0xD7FF);
    if (b > 0xDFFF) out.emplace_back(0xE000, b);
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) { utf8::append(out, cp); }

namespace {

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// How it works: a range of codepoints of one encoded length is cut until the lower bound's
// trailing continuation bytes are all minimal and the upper bound's all maximal, at every depth;
// then the encodings of the bounds give one byte range per position, and their product is
// exactly the range (the classic UTF-8 range compilation of regex engines).
void split_same_length(uint32_t a, uint32_t b, std::vector<std::vector<ByteSet>>& out) {
  const int n = utf8_length(a);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((a & ~m) != (b & ~m)) {
      if ((a & m) != 0) {
        split_same_length(a, a | m, out);
        split_same_length((a | m) + 1, b, out);
        return;
      }
      if ((b & m) != m) {
        split_same_length(a, (b & ~m) - 1, out);
        split_same_length(b & ~m, b, out);
        return;
      }
    }
  }
  std::string ea, eb;
  append_utf8(ea, a);
  append_utf8(eb, b);
  std::vector<ByteSet> seq(ea.size());
  for (size_t k = 0; k < ea.size(); ++k) {
    for (uint32_t x = static_cast<uint8_t>(ea[k]); x <= static_cast<uint8_t>(eb[k]); ++x)
      seq[k].set(x);
  }
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<std::vector<ByteSet>> utf8_ranges(uint32_t first, uint32_t last) {
  std::vector<std::vector<ByteSet>> out;
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodepoint};
  uint32_t a = first;
  for (uint32_t end : kLengthEnds) {
    if (a > last) break;
    if (a > end) continue;
    const uint32_t b = std::min(last, end);
    split_same_length(a, b, out);
    a = b + 1;
  }
  return out;
}

Expr Expr::codepoints(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  std::vector<Expr> options;
  // Single bytes of all sequences share one byte set, so ASCII classes stay one node.
  ByteSet ascii;
  for (auto [a, b] : normalize_ranges(ranges, false)) {
    for (std::vector<ByteSet>& seq : utf8_ranges(a, b)) {
      if (seq.size() == 1) {
        ascii |= seq[0];
        continue;
      }
      std::vector<Expr> parts;
      for (const ByteSet& s : seq) parts.push_back(byte_set(s));
      options.push_back(Expr::seq(std::move(parts)));
    }
  }
  if (ascii.any()) options.insert(options.begin(), byte_set(ascii));
  PAGODA_CHECK(!options.empty(), "an empty character class");
  return alt(std::move(options));
}

int32_t Grammar::add_rule(std::string name) {
  rules.push_back(Rule{std::move(name), Expr::empty()});
  return static_cast<int32_t>(rules.size()) - 1;
}

int32_t Grammar::find_rule(std::string_view name) const {
  for (size_t i = 0; i < rules.size(); ++i) {
    if (rules[i].name == name) return static_cast<int32_t>(i);
  }
  return -1;
}

namespace {

void print_bytes(const ByteSet& set, std::string& out) {
  if (set.count() == 1) {
    for (int b = 0; b < 256; ++b) {
      if (!set.test(static_cast<size_t>(b))) continue;
      if (b >= 0x20 && b < 0x7F && b != '"' && b != '\\') {
        out += '"';
        out += static_cast<char>(b);
        out += '"';
      } else {
        out += fmt::format("[\\x{:02X}]", b);
      }
      return;
    }
  }
  out += '[';
  for (int b = 0; b < 256;) {
    if (!set.test(static_cast<size_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && set.test(static_cast<size_t>(e + 1))) ++e;
    auto show = [&](int x) {
      if (x >= 0x20 && x < 0x7F && x != ']' && x != '\\' && x != '-' && x != '^') {
        out += static_cast<char>(x);
      } else {
        out += fmt::format("\\x{:02X}", x);
      }
    };
    show(b);
    if (e > b) {
      out += '-';
      show(e);
    }
    b = e + 1;
  }
  out += ']';
}

void print_expr(const Grammar& g, const Expr& e, std::string& out, bool nested) {
  switch (e.kind) {
    case Expr::Kind::kEmpty:
      out += "\"\"";
      return;
    case Expr::Kind::kBytes:
      print_bytes(e.bytes, out);
      return;
    case Expr::Kind::kRef:
      out += g.rules[static_cast<size_t>(e.rule)].name;
      return;
    case Expr::Kind::kSeq:
    case Expr::Kind::kAlt: {
      const bool alt = e.kind == Expr::Kind::kAlt;
      if (nested) out += '(';
      for (size_t i = 0; i < e.children().size(); ++i) {
        if (i > 0) out += alt ? " | " : " ";
        print_expr(g, e.children()[i], out, true);
      }
      if (nested) out += ')';
      return;
    }
    case Expr::Kind::kDfa:
      out += fmt::format("<automaton of {} states>", e.dfa->next.size());
      return;
    case Expr::Kind::kRepeat:
      print_expr(g, e.children()[0], out, true);
      if (e.min == 0 && e.max < 0) {
        out += '*';
      } else if (e.min == 1 && e.max < 0) {
        out += '+';
      } else if (e.min == 0 && e.max == 1) {
        out += '?';
      } else if (e.max < 0) {
        out += fmt::format("{{{},}}", e.min);
      } else {
        out += fmt::format("{{{},{}}}", e.min, e.max);
      }
      return;
  }
}

}  // namespace

std::string Grammar::to_gbnf() const {
  std::string out;
  for (const Rule& r : rules) {
    out += r.name;
    out += " ::= ";
    print_expr(*this, r.body, out, false);
    out += '\n';
  }
  return out;
}

}  // namespace pagoda::structured
