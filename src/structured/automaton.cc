#include "structured/automaton.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::structured {

ByteSet Automaton::scan_bytes(int32_t s) const {
  ByteSet out;
  const size_t row = static_cast<size_t>(s) * static_cast<size_t>(num_classes);
  for (int32_t c = 0; c < num_classes; ++c) {
    if (next[row + static_cast<size_t>(c)] >= 0) out |= class_bytes[static_cast<size_t>(c)];
  }
  return out;
}

namespace {

// ---- Byte classes: the coarsest partition of 0..255 that every byte set of the grammar is a
// union of; transition tables then have one column per class instead of per byte.
// The byte sets of a DFA's edges, one per (state, target).
std::vector<std::pair<int32_t, ByteSet>> dfa_edges(const ByteDfa& d, size_t state) {
  std::vector<std::pair<int32_t, ByteSet>> edges;
  for (int b = 0; b < 256; ++b) {
    const int32_t t = d.next[state][static_cast<size_t>(b)];
    if (t < 0) continue;
    auto it = std::find_if(edges.begin(), edges.end(), [&](const auto& e) { return e.first == t; });
    if (it == edges.end()) {
      edges.emplace_back(t, ByteSet());
      it = edges.end() - 1;
    }
    it->second.set(static_cast<size_t>(b));
  }
  return edges;
}

void collect_sets(const Expr& e, std::vector<ByteSet>& sets) {
  if (e.kind == Expr::Kind::kBytes) sets.push_back(e.bytes);
  if (e.kind == Expr::Kind::kDfa) {
    for (size_t s = 0; s < e.dfa->next.size(); ++s) {
      for (auto& [t, set] : dfa_edges(*e.dfa, s)) sets.push_back(set);
    }
  }
  for (const Expr& c : e.children()) collect_sets(c, sets);
}

struct ClassMap {
  std::array<uint8_t, 256> of{};
  int32_t count = 1;
  std::vector<ByteSet> bytes;
};

ClassMap byte_classes(const Grammar& g) {
  std::vector<ByteSet> all;
  for (const Rule& r : g.rules) collect_sets(r.body, all);
  // Distinct sets only (a grammar repeats the same few thousands of times).
  auto words = [](const ByteSet& b) {
    std::array<uint64_t, 4> w{};
    for (size_t i = 0; i < 256; ++i) {
      if (b.test(i)) w[i / 64] |= uint64_t{1} << (i % 64);
    }
    return w;
  };
  std::vector<std::pair<std::array<uint64_t, 4>, size_t>> keyed;
  keyed.reserve(all.size());
  {
    for (size_t i = 0; i < all.size(); ++i) keyed.emplace_back(words(all[i]), i);
    std::sort(keyed.begin(), keyed.end());
  }
  std::vector<ByteSet> sets;
  for (size_t i = 0; i < keyed.size(); ++i) {
    if (i == 0 || keyed[i].first != keyed[i - 1].first) sets.push_back(all[keyed[i].second]);
  }
  ClassMap m;
  std::array<int32_t, 256> cls{};
  int32_t count = 1;
  for (const ByteSet& s : sets) {
    // Refine: a class splits into (in s, not in s).
    std::map<std::pair<int32_t, bool>, int32_t> renumber;
    std::array<int32_t, 256> next{};
    for (int b = 0; b < 256; ++b) {
      const auto key = std::make_pair(cls[static_cast<size_t>(b)], s.test(static_cast<size_t>(b)));
      auto it = renumber.try_emplace(key, static_cast<int32_t>(renumber.size())).first;
      next[static_cast<size_t>(b)] = it->second;
    }
    cls = next;
    count = static_cast<int32_t>(renumber.size());
  }
  m.count = count;
  m.bytes.assign(static_cast<size_t>(count), ByteSet());
  for (int b = 0; b < 256; ++b) {
    m.of[static_cast<size_t>(b)] = static_cast<uint8_t>(cls[static_cast<size_t>(b)]);
    m.bytes[static_cast<size_t>(cls[static_cast<size_t>(b)])].set(static_cast<size_t>(b));
  }
  return m;
}

// ---- Thompson NFA of one rule body.
struct Nfa {
  struct Node {
    std::vector<int32_t> eps;
    std::vector<std::pair<std::vector<int32_t>, int32_t>> bytes;  // (classes, target)
    std::vector<std::pair<int32_t, int32_t>> calls;               // (rule, target)
  };
  std::vector<Node> nodes;
  int64_t limit = 0;
  const ClassMap* classes = nullptr;
  std::string rule_name;

  int32_t add() {
    if (static_cast<int64_t>(nodes.size()) >= limit) {
      throw InvalidArgument(fmt::format(
          "grammar: rule '{}' is too large (more than {} automaton nodes)", rule_name, limit));
    }
    nodes.emplace_back();
    return static_cast<int32_t>(nodes.size()) - 1;
  }

  // Adds e between a new entry and exit; returns (entry, exit).
  std::pair<int32_t, int32_t> build(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kEmpty: {
        const int32_t n = add();
        return {n, n};
      }
      case Expr::Kind::kBytes: {
        const int32_t a = add(), b = add();
        std::vector<int32_t> cls;
        for (int32_t c = 0; c < classes->count; ++c) {
          if ((classes->bytes[static_cast<size_t>(c)] & e.bytes).any()) cls.push_back(c);
        }
        nodes[static_cast<size_t>(a)].bytes.emplace_back(std::move(cls), b);
        return {a, b};
      }
      case Expr::Kind::kDfa: {
        const ByteDfa& d = *e.dfa;
        const auto base = static_cast<int32_t>(nodes.size());
        for (size_t s = 0; s < d.next.size(); ++s) (void)add();
        const int32_t exit = add();
        for (size_t s = 0; s < d.next.size(); ++s) {
          auto& node = nodes[static_cast<size_t>(base) + s];
          for (auto& [t, set] : dfa_edges(d, s)) {
            std::vector<int32_t> cls;
            for (int32_t c = 0; c < classes->count; ++c) {
              if ((classes->bytes[static_cast<size_t>(c)] & set).any()) cls.push_back(c);
            }
            node.bytes.emplace_back(std::move(cls), base + t);
          }
          if (d.final[s]) node.eps.push_back(exit);
        }
        return {base, exit};
      }
      case Expr::Kind::kRef: {
        const int32_t a = add(), b = add();
        nodes[static_cast<size_t>(a)].calls.emplace_back(e.rule, b);
        return {a, b};
      }
      case Expr::Kind::kSeq: {
        auto [in, out] = build(e.children()[0]);
        for (size_t i = 1; i < e.children().size(); ++i) {
          auto [a, b] = build(e.children()[i]);
          nodes[static_cast<size_t>(out)].eps.push_back(a);
          out = b;
        }
        return {in, out};
      }
      case Expr::Kind::kAlt: {
        const int32_t in = add(), out = add();
        for (const Expr& c : e.children()) {
          auto [a, b] = build(c);
          nodes[static_cast<size_t>(in)].eps.push_back(a);
          nodes[static_cast<size_t>(b)].eps.push_back(out);
        }
        return {in, out};
      }
      case Expr::Kind::kRepeat: {
        const int32_t in = add();
        int32_t out = in;
        for (int32_t i = 0; i < e.min; ++i) {
          auto [a, b] = build(e.children()[0]);
          nodes[static_cast<size_t>(out)].eps.push_back(a);
          out = b;
        }
        if (e.max < 0) {
          // out -> body -> out, and out is the exit.
          auto [a, b] = build(e.children()[0]);
          const int32_t loop = add();
          nodes[static_cast<size_t>(out)].eps.push_back(loop);
          nodes[static_cast<size_t>(loop)].eps.push_back(a);
          nodes[static_cast<size_t>(b)].eps.push_back(loop);
          return {in, loop};
        }
        // Optional copies nested (x (x (x)?)?)?: every skip goes straight to the exit.
        const int32_t exit = add();
        nodes[static_cast<size_t>(out)].eps.push_back(exit);
        for (int32_t i = e.min; i < e.max; ++i) {
          auto [a, b] = build(e.children()[0]);
          nodes[static_cast<size_t>(out)].eps.push_back(a);
          nodes[static_cast<size_t>(b)].eps.push_back(exit);
          out = b;
        }
        return {in, exit};
      }
    }
    PAGODA_CHECK(false, "unknown expression kind");
  }
};

// The number of NFA nodes e builds (an upper bound), saturating past cap.
int64_t nfa_size(const Expr& e, int64_t cap) {
  auto sat = [cap](int64_t x) { return std::min(x, cap + 1); };
  switch (e.kind) {
    case Expr::Kind::kEmpty:
      return 1;
    case Expr::Kind::kBytes:
    case Expr::Kind::kRef:
      return 2;
    case Expr::Kind::kDfa:
      return static_cast<int64_t>(e.dfa->next.size()) + 1;
    case Expr::Kind::kSeq:
    case Expr::Kind::kAlt: {
      int64_t total = 2;
      for (const Expr& c : e.children()) total = sat(total + nfa_size(c, cap));
      return total;
    }
    case Expr::Kind::kRepeat: {
      const int64_t copies = e.max < 0 ? static_cast<int64_t>(e.min) + 1 : e.max;
      const int64_t one = nfa_size(e.children()[0], cap);
      return sat(3 + (one > cap / std::max<int64_t>(copies, 1) ? cap + 1 : one * copies));
    }
  }
  return cap + 1;
}

// ---- One rule's DFA (before numbering across rules).
struct RuleDfa {
  int32_t num_states = 0;
  std::vector<int32_t> next;                                    // [states, classes]
  std::vector<std::vector<std::pair<int32_t, int32_t>>> calls;  // per state (rule, target)
  std::vector<uint8_t> final;
};

struct VectorHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return h;
  }
};

// Subset construction over byte classes and call symbols.
RuleDfa determinize(const Nfa& nfa, int32_t entry, int32_t exit, int32_t num_classes,
                    int64_t max_states, const std::string& rule_name) {
  // Epsilon closure with a visit stamp per node (one allocation for the whole construction).
  std::vector<uint32_t> seen(nfa.nodes.size(), 0);
  uint32_t stamp = 0;
  std::vector<int32_t> stack;
  auto closure = [&](std::vector<int32_t>& set) {
    ++stamp;
    stack = set;
    for (int32_t s : set) seen[static_cast<size_t>(s)] = stamp;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      for (int32_t t : nfa.nodes[static_cast<size_t>(s)].eps) {
        if (seen[static_cast<size_t>(t)] != stamp) {
          seen[static_cast<size_t>(t)] = stamp;
          set.push_back(t);
          stack.push_back(t);
        }
      }
    }
    // Only nodes with edges or the exit matter for the state's identity.
    std::erase_if(set, [&](int32_t s) {
      const auto& n = nfa.nodes[static_cast<size_t>(s)];
      return s != exit && n.bytes.empty() && n.calls.empty();
    });
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
  };
  RuleDfa dfa;
  std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> ids;
  std::vector<std::vector<int32_t>> sets;
  auto intern = [&](std::vector<int32_t> set) {
    auto [it, inserted] = ids.try_emplace(set, static_cast<int32_t>(sets.size()));
    if (inserted) {
      if (static_cast<int64_t>(sets.size()) >= max_states) {
        throw InvalidArgument(
            fmt::format("grammar: rule '{}' is too complex (more than {} automaton states)",
                        rule_name, max_states));
      }
      sets.push_back(std::move(set));
    }
    return it->second;
  };
  std::vector<int32_t> start{entry};
  closure(start);
  intern(std::move(start));
  std::vector<std::vector<int32_t>> by_class(static_cast<size_t>(num_classes));
  for (size_t i = 0; i < sets.size(); ++i) {
    for (auto& v : by_class) v.clear();
    std::map<int32_t, std::vector<int32_t>> by_rule;
    bool final = false;
    for (int32_t s : sets[i]) {
      if (s == exit) final = true;
      const auto& n = nfa.nodes[static_cast<size_t>(s)];
      for (const auto& [cls, target] : n.bytes) {
        for (int32_t c : cls) by_class[static_cast<size_t>(c)].push_back(target);
      }
      for (const auto& [rule, target] : n.calls) by_rule[rule].push_back(target);
    }
    dfa.final.push_back(final ? 1 : 0);
    std::vector<int32_t> row(static_cast<size_t>(num_classes), -1);
    for (int32_t c = 0; c < num_classes; ++c) {
      auto& targets = by_class[static_cast<size_t>(c)];
      if (targets.empty()) continue;
      std::vector<int32_t> set = targets;
      closure(set);
      row[static_cast<size_t>(c)] = intern(std::move(set));
    }
    dfa.next.insert(dfa.next.end(), row.begin(), row.end());
    std::vector<std::pair<int32_t, int32_t>> calls;
    for (auto& [rule, targets] : by_rule) {
      std::vector<int32_t> set = targets;
      closure(set);
      calls.emplace_back(rule, intern(std::move(set)));
    }
    dfa.calls.push_back(std::move(calls));
  }
  dfa.num_states = static_cast<int32_t>(sets.size());
  return dfa;
}

// Hopcroft's partition refinement, O(n |symbols| log n): blocks start as final / not final (a
// dead state n stands for every missing edge); a splitter (block A, symbol c) splits each block
// into the states whose c-edge enters A and the rest; of a split block not waiting as a splitter,
// only the smaller half needs to become one. Symbols are the byte classes and the called rules.
std::vector<int32_t> hopcroft_blocks(const RuleDfa& d, int32_t num_classes, int32_t& num_blocks) {
  const auto n = static_cast<size_t>(d.num_states);
  const size_t dead = n, total = n + 1;
  std::map<int32_t, int32_t> rule_symbol;
  for (const auto& calls : d.calls) {
    for (const auto& [rule, t] : calls) {
      rule_symbol.try_emplace(rule, num_classes + static_cast<int32_t>(rule_symbol.size()));
    }
  }
  const auto num_symbols = static_cast<size_t>(num_classes) + rule_symbol.size();
  // target[s * num_symbols + c], the dead state for missing edges (and from the dead state).
  std::vector<int32_t> target(total * num_symbols, static_cast<int32_t>(dead));
  for (size_t s = 0; s < n; ++s) {
    for (int32_t c = 0; c < num_classes; ++c) {
      const int32_t t = d.next[s * static_cast<size_t>(num_classes) + static_cast<size_t>(c)];
      if (t >= 0) target[s * num_symbols + static_cast<size_t>(c)] = t;
    }
    for (const auto& [rule, t] : d.calls[s]) {
      target[s * num_symbols + static_cast<size_t>(rule_symbol[rule])] = t;
    }
  }
  // Inverse edges, per (symbol, target): CSR over target * num_symbols + symbol.
  std::vector<int32_t> inv_begin(total * num_symbols + 1, 0), inv;
  for (size_t s = 0; s < total; ++s) {
    for (size_t c = 0; c < num_symbols; ++c) {
      ++inv_begin[static_cast<size_t>(target[s * num_symbols + c]) * num_symbols + c + 1];
    }
  }
  for (size_t i = 1; i < inv_begin.size(); ++i) inv_begin[i] += inv_begin[i - 1];
  inv.resize(static_cast<size_t>(inv_begin.back()));
  {
    std::vector<int32_t> fill(inv_begin.begin(), inv_begin.end() - 1);
    for (size_t s = 0; s < total; ++s) {
      for (size_t c = 0; c < num_symbols; ++c) {
        inv[static_cast<size_t>(
            fill[static_cast<size_t>(target[s * num_symbols + c]) * num_symbols + c]++)] =
            static_cast<int32_t>(s);
      }
    }
  }
  // The partition: elems grouped by block, each block a range [first, end) of elems.
  std::vector<int32_t> elems(total), loc(total), block(total), first, end, marked;
  size_t k = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const size_t begin = k;
    for (size_t s = 0; s < total; ++s) {
      const bool fin = s < n && d.final[s];
      if (fin == (pass == 0)) {
        elems[k] = static_cast<int32_t>(s);
        loc[s] = static_cast<int32_t>(k);
        block[s] = static_cast<int32_t>(first.size());
        ++k;
      }
    }
    if (k > begin) {
      first.push_back(static_cast<int32_t>(begin));
      end.push_back(static_cast<int32_t>(k));
    }
  }
  marked.assign(first.size(), 0);
  std::vector<std::pair<int32_t, int32_t>> work;  // (block, symbol)
  std::vector<char> waiting;                      // [block * num_symbols + symbol]
  auto wait = [&](int32_t b, size_t c) {
    const size_t at = static_cast<size_t>(b) * num_symbols + c;
    if (waiting.size() <= at) waiting.resize((static_cast<size_t>(b) + 1) * num_symbols, 0);
    if (!waiting[at]) {
      waiting[at] = 1;
      work.emplace_back(b, static_cast<int32_t>(c));
    }
  };
  for (int32_t b = 0; b < static_cast<int32_t>(first.size()); ++b) {
    for (size_t c = 0; c < num_symbols; ++c) wait(b, c);
  }
  std::vector<int32_t> touched, splitter;
  while (!work.empty()) {
    const auto [a, c] = work.back();
    work.pop_back();
    waiting[static_cast<size_t>(a) * num_symbols + static_cast<size_t>(c)] = 0;
    // The states whose c-edge enters block a, moved to the front of their blocks.
    splitter.assign(elems.begin() + first[static_cast<size_t>(a)],
                    elems.begin() + end[static_cast<size_t>(a)]);
    touched.clear();
    for (int32_t t : splitter) {
      const size_t key = static_cast<size_t>(t) * num_symbols + static_cast<size_t>(c);
      for (int32_t i = inv_begin[key]; i < inv_begin[key + 1]; ++i) {
        const int32_t s = inv[static_cast<size_t>(i)];
        const auto b = static_cast<size_t>(block[static_cast<size_t>(s)]);
        const int32_t pos = first[b] + marked[b];
        if (loc[static_cast<size_t>(s)] < pos) continue;  // already marked
        if (marked[b] == 0) touched.push_back(static_cast<int32_t>(b));
        const int32_t other = elems[static_cast<size_t>(pos)];
        std::swap(elems[static_cast<size_t>(pos)],
                  elems[static_cast<size_t>(loc[static_cast<size_t>(s)])]);
        loc[static_cast<size_t>(other)] = loc[static_cast<size_t>(s)];
        loc[static_cast<size_t>(s)] = pos;
        ++marked[b];
      }
    }
    for (int32_t b : touched) {
      const auto bs = static_cast<size_t>(b);
      const int32_t m = marked[bs];
      marked[bs] = 0;
      if (m == end[bs] - first[bs]) continue;  // all of the block: no split
      // The marked part [first, first + m) becomes a new block.
      const auto nb = static_cast<int32_t>(first.size());
      first.push_back(first[bs]);
      end.push_back(first[bs] + m);
      marked.push_back(0);
      first[bs] += m;
      for (int32_t i = first[static_cast<size_t>(nb)]; i < end[static_cast<size_t>(nb)]; ++i) {
        block[static_cast<size_t>(elems[static_cast<size_t>(i)])] = nb;
      }
      const bool new_smaller = m <= end[bs] - first[bs];
      for (size_t sym = 0; sym < num_symbols; ++sym) {
        const size_t at = bs * num_symbols + sym;
        if (at < waiting.size() && waiting[at]) {
          wait(nb, sym);  // both halves wait
        } else {
          wait(new_smaller ? nb : b, sym);
        }
      }
    }
  }
  num_blocks = static_cast<int32_t>(first.size());
  block.resize(n);  // the dead state's block is not a state
  return block;
}

RuleDfa minimize(const RuleDfa& d, int32_t num_classes) {
  const auto n = static_cast<size_t>(d.num_states);
  int32_t num_blocks = 0;
  std::vector<int32_t> block = hopcroft_blocks(d, num_classes, num_blocks);
  // Renumber so that the start state (0) stays 0, the others in order of first appearance.
  std::vector<int32_t> renumber(static_cast<size_t>(num_blocks), -1);
  int32_t next_id = 0;
  for (size_t s = 0; s < n; ++s) {
    if (renumber[static_cast<size_t>(block[s])] < 0)
      renumber[static_cast<size_t>(block[s])] = next_id++;
  }
  // The dead state's block has no state unless some state behaves as dead: count used blocks.
  const int32_t used = next_id;
  RuleDfa m;
  m.num_states = used;
  m.next.assign(static_cast<size_t>(used) * static_cast<size_t>(num_classes), -1);
  m.calls.resize(static_cast<size_t>(used));
  m.final.assign(static_cast<size_t>(used), 0);
  std::vector<char> done(static_cast<size_t>(used), 0);
  for (size_t s = 0; s < n; ++s) {
    const auto b = static_cast<size_t>(renumber[static_cast<size_t>(block[s])]);
    if (done[b]) continue;
    done[b] = 1;
    m.final[b] = d.final[s];
    for (int32_t c = 0; c < num_classes; ++c) {
      const int32_t t = d.next[s * static_cast<size_t>(num_classes) + static_cast<size_t>(c)];
      m.next[b * static_cast<size_t>(num_classes) + static_cast<size_t>(c)] =
          t < 0 ? -1 : renumber[static_cast<size_t>(block[static_cast<size_t>(t)])];
    }
    for (const auto& [rule, t] : d.calls[s]) {
      m.calls[b].emplace_back(rule, renumber[static_cast<size_t>(block[static_cast<size_t>(t)])]);
    }
  }
  return m;
}

}  // namespace

void analyze_automaton(Automaton& a);  // automaton_analysis.cc

Automaton build_automaton(const Grammar& g, const AutomatonLimits& limits) {
  if (g.root < 0 || g.root >= static_cast<int32_t>(g.rules.size())) {
    throw InvalidArgument("grammar: no root rule");
  }
  const ClassMap classes = byte_classes(g);
  Automaton a;
  a.root = g.root;
  a.num_classes = classes.count;
  a.byte_class = classes.of;
  a.class_bytes = classes.bytes;
  int64_t nfa_budget = limits.max_nfa_nodes;
  int64_t state_budget = limits.max_states;
  std::vector<RuleDfa> dfas;
  for (const Rule& r : g.rules) {
    if (nfa_size(r.body, nfa_budget) > nfa_budget) {  // refuse before building it
      throw InvalidArgument(fmt::format(
          "grammar: rule '{}' is too large (more than {} automaton nodes)", r.name, nfa_budget));
    }
    Nfa nfa;
    nfa.limit = nfa_budget;
    nfa.classes = &classes;
    nfa.rule_name = r.name;
    auto [entry, exit] = nfa.build(r.body);
    nfa_budget -= static_cast<int64_t>(nfa.nodes.size());
    RuleDfa dfa =
        minimize(determinize(nfa, entry, exit, classes.count, state_budget, r.name), classes.count);
    state_budget -= dfa.num_states;
    dfas.push_back(std::move(dfa));
    a.rule_names.push_back(r.name);
  }
  // Number the states across rules.
  int32_t total = 0;
  for (const RuleDfa& d : dfas) {
    a.rule_start.push_back(total);
    total += d.num_states;
  }
  a.rule_of.resize(static_cast<size_t>(total));
  a.flags.assign(static_cast<size_t>(total), 0);
  a.next.assign(static_cast<size_t>(total) * static_cast<size_t>(a.num_classes), -1);
  a.call_begin.assign(static_cast<size_t>(total) + 1, 0);
  for (size_t r = 0; r < dfas.size(); ++r) {
    const RuleDfa& d = dfas[r];
    const int32_t base = a.rule_start[r];
    for (int32_t s = 0; s < d.num_states; ++s) {
      const auto gs = static_cast<size_t>(base + s);
      a.rule_of[gs] = static_cast<int32_t>(r);
      if (d.final[static_cast<size_t>(s)]) a.flags[gs] |= Automaton::kFinal;
      for (int32_t c = 0; c < a.num_classes; ++c) {
        const int32_t t = d.next[static_cast<size_t>(s) * static_cast<size_t>(a.num_classes) +
                                 static_cast<size_t>(c)];
        a.next[gs * static_cast<size_t>(a.num_classes) + static_cast<size_t>(c)] =
            t < 0 ? -1 : base + t;
      }
      for (const auto& [rule, t] : d.calls[static_cast<size_t>(s)]) {
        a.calls.push_back(Call{rule, base + t, false});
      }
      a.call_begin[gs + 1] = static_cast<int32_t>(a.calls.size());
    }
  }
  analyze_automaton(a);
  return a;
}

}  // namespace pagoda::structured
