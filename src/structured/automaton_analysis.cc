// The global analyses of a compiled grammar, run once after its rules are determinized: which
// states can still reach the end of the text (others are cut away), which rules match the empty
// string, left recursion (refused), tail calls, and each rule's FOLLOW set (the bytes that may
// come right after it), which the token-mask precomputation uses to reject tokens that leave a
// rule into bytes no context accepts.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/status.h"
#include "structured/automaton.h"

namespace pagoda::structured {
namespace {

size_t cell(const Automaton& a, int32_t s, int32_t c) {
  return static_cast<size_t>(s) * static_cast<size_t>(a.num_classes) + static_cast<size_t>(c);
}

template <typename F>
void for_calls(const Automaton& a, int32_t s, F&& f) {
  for (int32_t i = a.call_begin[static_cast<size_t>(s)];
       i < a.call_begin[static_cast<size_t>(s) + 1]; ++i) {
    f(a.calls[static_cast<size_t>(i)]);
  }
}

// Reverse edges, for the worklist analyses below (each runs in time linear in the edges).
struct Reverse {
  std::vector<std::vector<int32_t>> byte_preds;                        // [state] -> sources
  std::vector<std::vector<std::pair<int32_t, int32_t>>> ret_users;     // [ret] -> (caller, rule)
  std::vector<std::vector<std::pair<int32_t, int32_t>>> rule_callers;  // [rule] -> (caller, ret)
};

Reverse reverse_edges(const Automaton& a) {
  Reverse r;
  r.byte_preds.resize(static_cast<size_t>(a.num_states()));
  r.ret_users.resize(static_cast<size_t>(a.num_states()));
  r.rule_callers.resize(a.rule_start.size());
  for (int32_t s = 0; s < a.num_states(); ++s) {
    int32_t last = -1;
    for (int32_t c = 0; c < a.num_classes; ++c) {
      const int32_t t = a.next[cell(a, s, c)];
      if (t >= 0 && t != last) r.byte_preds[static_cast<size_t>(t)].push_back(s);
      last = t;
    }
    for_calls(a, s, [&](const Call& call) {
      r.ret_users[static_cast<size_t>(call.ret)].emplace_back(s, call.rule);
      r.rule_callers[static_cast<size_t>(call.rule)].emplace_back(s, call.ret);
    });
  }
  return r;
}

// Live: final, or an edge to a live state, or a call of a productive rule returning to a live
// state. Everything else can never reach the end of the text.
std::vector<char> live_states(const Automaton& a, const Reverse& r) {
  std::vector<char> live(static_cast<size_t>(a.num_states()), 0);
  std::vector<int32_t> work;
  auto mark = [&](int32_t s) {
    if (!live[static_cast<size_t>(s)]) {
      live[static_cast<size_t>(s)] = 1;
      work.push_back(s);
    }
  };
  for (int32_t s = 0; s < a.num_states(); ++s) {
    if (a.final(s)) mark(s);
  }
  while (!work.empty()) {
    const int32_t t = work.back();
    work.pop_back();
    for (int32_t s : r.byte_preds[static_cast<size_t>(t)]) mark(s);
    for (const auto& [s, rule] : r.ret_users[static_cast<size_t>(t)]) {
      if (live[static_cast<size_t>(a.rule_start[static_cast<size_t>(rule)])]) mark(s);
    }
    const auto rule = static_cast<size_t>(a.rule_of[static_cast<size_t>(t)]);
    if (a.rule_start[rule] == t) {
      for (const auto& [s, ret] : r.rule_callers[rule]) {
        if (live[static_cast<size_t>(ret)]) mark(s);
      }
    }
  }
  return live;
}

void trim(Automaton& a, const std::vector<char>& live) {
  for (int32_t s = 0; s < a.num_states(); ++s) {
    for (int32_t c = 0; c < a.num_classes; ++c) {
      int32_t& t = a.next[cell(a, s, c)];
      if (t >= 0 && !live[static_cast<size_t>(t)]) t = -1;
    }
  }
  std::vector<Call> calls;
  std::vector<int32_t> begin(a.call_begin.size(), 0);
  for (int32_t s = 0; s < a.num_states(); ++s) {
    for_calls(a, s, [&](const Call& call) {
      if (live[static_cast<size_t>(a.rule_start[static_cast<size_t>(call.rule)])] &&
          live[static_cast<size_t>(call.ret)]) {
        calls.push_back(call);
      }
    });
    begin[static_cast<size_t>(s) + 1] = static_cast<int32_t>(calls.size());
  }
  a.calls = std::move(calls);
  a.call_begin = std::move(begin);
}

void check_left_recursion(const Automaton& a, const std::vector<char>& nullable_rule) {
  const auto num_rules = a.rule_start.size();
  // left[r]: the rules r may call before consuming a byte.
  std::vector<std::vector<int32_t>> left(num_rules);
  for (size_t r = 0; r < num_rules; ++r) {
    std::vector<int32_t> stack{a.rule_start[r]};
    std::vector<int32_t> seen{a.rule_start[r]};
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      for_calls(a, s, [&](const Call& call) {
        left[r].push_back(call.rule);
        if (nullable_rule[static_cast<size_t>(call.rule)] &&
            std::find(seen.begin(), seen.end(), call.ret) == seen.end()) {
          seen.push_back(call.ret);
          stack.push_back(call.ret);
        }
      });
    }
  }
  // A cycle in `left` is left recursion: find one by depth-first search and name it.
  std::vector<int> color(num_rules, 0);
  std::vector<int32_t> path;
  auto dfs = [&](auto&& self, int32_t r) -> void {
    color[static_cast<size_t>(r)] = 1;
    path.push_back(r);
    for (int32_t t : left[static_cast<size_t>(r)]) {
      if (color[static_cast<size_t>(t)] == 1) {
        std::string cycle;
        const auto from = std::find(path.begin(), path.end(), t);
        for (auto it = from; it != path.end(); ++it)
          cycle += a.rule_names[static_cast<size_t>(*it)] + " -> ";
        cycle += a.rule_names[static_cast<size_t>(t)];
        throw InvalidArgument(fmt::format(
            "grammar: left recursion ({}): a rule may not call itself before matching a "
            "character",
            cycle));
      }
      if (color[static_cast<size_t>(t)] == 0) self(self, t);
    }
    path.pop_back();
    color[static_cast<size_t>(r)] = 2;
  };
  for (size_t r = 0; r < num_rules; ++r) {
    if (color[r] == 0) dfs(dfs, static_cast<int32_t>(r));
  }
}

}  // namespace

void analyze_automaton(Automaton& a) {
  const int32_t n = a.num_states();
  const auto num_rules = a.rule_start.size();
  const std::vector<char> live = live_states(a, reverse_edges(a));
  if (!live[static_cast<size_t>(a.rule_start[static_cast<size_t>(a.root)])]) {
    throw InvalidArgument(fmt::format("grammar: the rule '{}' matches no finite text",
                                      a.rule_names[static_cast<size_t>(a.root)]));
  }
  trim(a, live);
  const Reverse r = reverse_edges(a);
  for (int32_t s = 0; s < n; ++s) {
    uint8_t& f = a.flags[static_cast<size_t>(s)];
    f &= Automaton::kFinal;
    for (int32_t c = 0; c < a.num_classes; ++c) {
      if (a.next[cell(a, s, c)] >= 0) f |= Automaton::kScans;
    }
    if (a.call_begin[static_cast<size_t>(s) + 1] > a.call_begin[static_cast<size_t>(s)]) {
      f |= Automaton::kCalls;
    }
  }
  // Nullable states (may end their rule without a byte) and rules.
  std::vector<char> null_state(static_cast<size_t>(n), 0), nullable_rule(num_rules, 0);
  {
    std::vector<int32_t> work;
    auto mark = [&](int32_t s) {
      if (!null_state[static_cast<size_t>(s)]) {
        null_state[static_cast<size_t>(s)] = 1;
        work.push_back(s);
      }
    };
    for (int32_t s = 0; s < n; ++s) {
      if (a.final(s)) mark(s);
    }
    while (!work.empty()) {
      const int32_t t = work.back();
      work.pop_back();
      for (const auto& [s, rule] : r.ret_users[static_cast<size_t>(t)]) {
        if (nullable_rule[static_cast<size_t>(rule)]) mark(s);
      }
      const auto rule = static_cast<size_t>(a.rule_of[static_cast<size_t>(t)]);
      if (a.rule_start[rule] == t) {
        nullable_rule[rule] = 1;
        for (const auto& [s, ret] : r.rule_callers[rule]) {
          if (null_state[static_cast<size_t>(ret)]) mark(s);
        }
      }
    }
  }
  check_left_recursion(a, nullable_rule);
  for (Call& call : a.calls) {
    call.tail = a.flags[static_cast<size_t>(call.ret)] == Automaton::kFinal;
  }
  // FIRST of each state: its own bytes, its callees' FIRST, and after a nullable callee its
  // return state's FIRST. A change flows to the callers of a rule start and to nullable calls'
  // callers of a return state.
  std::vector<ByteSet> first(static_cast<size_t>(n));
  std::vector<int32_t> work;
  std::vector<char> queued(static_cast<size_t>(n), 1);
  for (int32_t s = 0; s < n; ++s) {
    first[static_cast<size_t>(s)] = a.scan_bytes(s);
    work.push_back(s);
  }
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    queued[static_cast<size_t>(s)] = 0;
    ByteSet f = first[static_cast<size_t>(s)];
    for_calls(a, s, [&](const Call& call) {
      f |= first[static_cast<size_t>(a.rule_start[static_cast<size_t>(call.rule)])];
      if (nullable_rule[static_cast<size_t>(call.rule)]) f |= first[static_cast<size_t>(call.ret)];
    });
    if (f == first[static_cast<size_t>(s)]) continue;
    first[static_cast<size_t>(s)] = f;
    auto requeue = [&](int32_t x) {
      if (!queued[static_cast<size_t>(x)]) {
        queued[static_cast<size_t>(x)] = 1;
        work.push_back(x);
      }
    };
    const auto rule = static_cast<size_t>(a.rule_of[static_cast<size_t>(s)]);
    if (a.rule_start[rule] == s) {
      for (const auto& [caller, ret] : r.rule_callers[rule]) requeue(caller);
    }
    for (const auto& [caller, callee] : r.ret_users[static_cast<size_t>(s)]) {
      if (nullable_rule[static_cast<size_t>(callee)]) requeue(caller);
    }
  }
  // FOLLOW of each rule: FIRST of its return states, and the caller's FOLLOW where the return
  // state is nullable (propagated along those rule-to-rule edges).
  a.follow.assign(num_rules, ByteSet());
  std::vector<std::vector<int32_t>> flows(num_rules);  // caller rule -> callee rules
  for (int32_t s = 0; s < n; ++s) {
    const auto caller = static_cast<size_t>(a.rule_of[static_cast<size_t>(s)]);
    for_calls(a, s, [&](const Call& call) {
      a.follow[static_cast<size_t>(call.rule)] |= first[static_cast<size_t>(call.ret)];
      if (null_state[static_cast<size_t>(call.ret)]) flows[caller].push_back(call.rule);
    });
  }
  std::vector<int32_t> rules(num_rules);
  for (size_t i = 0; i < num_rules; ++i) rules[i] = static_cast<int32_t>(i);
  while (!rules.empty()) {
    const auto from = static_cast<size_t>(rules.back());
    rules.pop_back();
    for (int32_t to : flows[from]) {
      const ByteSet f = a.follow[static_cast<size_t>(to)] | a.follow[from];
      if (f != a.follow[static_cast<size_t>(to)]) {
        a.follow[static_cast<size_t>(to)] = f;
        rules.push_back(to);
      }
    }
  }
}

}  // namespace pagoda::structured
