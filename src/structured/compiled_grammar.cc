#include "structured/compiled_grammar.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <unordered_map>

#include "core/status.h"
#include "core/thread_pool.h"
#include "structured/stack_arena.h"
#include "structured/state_cache.h"

namespace pagoda::structured {
namespace {

// Classifies every token at one scanning state by a walk over the vocabulary as a trie: the
// tokens are sorted, so the tokens under a prefix are a range of sorted(). positions_[d] is the
// parse after the d bytes of the current prefix, from a stack holding the state alone (-1 below
// it stands for whatever the real stack holds). Only bytes some frame can scan are descended
// into; other subtrees are skipped whole. `pops_` are the depths on the current path at which
// the walk returned below that stack: a token that continues past one is uncertain.
class StateClassifier {
 public:
  StateClassifier(const Automaton& a, const Vocabulary& v, const std::vector<ByteSet>& scan_sets)
      : a_(a), v_(v), scan_sets_(scan_sets), arena_(a) {}

  /// follow: the bytes that may come after the state's rule (exits into others are rejected).
  StateTokens classify(int32_t state, const ByteSet& follow) {
    arena_.clear();
    follow_ = &follow;
    out_ = StateTokens();
    accepted_.clear();
    suffix_index_.clear();
    out_.suffix_begin.push_back(0);
    if (positions_.size() < static_cast<size_t>(v_.max_token_bytes()) + 1) {
      positions_.resize(static_cast<size_t>(v_.max_token_bytes()) + 1);
    }
    positions_[0].frames.assign(1, Frame{state, -1});
    positions_[0].ended = false;
    pops_.clear();
    walk(0, 0);
    return finish();
  }

 private:
  // The tokens under trie node n, whose prefix (d bytes) led to positions_[d].
  void walk(int32_t n, size_t d) {
    const auto& trie = v_.trie();
    const auto& sorted = v_.sorted();
    const TrieNode& node = trie[static_cast<size_t>(n)];
    for (int32_t k = node.begin; k < node.begin + node.num_here; ++k) {  // the prefix is a token
      if (positions_[d].dead()) {
        by_pops(sorted[static_cast<size_t>(k)]);
      } else {
        accepted_.push_back(sorted[static_cast<size_t>(k)]);
      }
    }
    const Position& here = positions_[d];
    if (here.frames.empty()) {  // nothing continues: only exits below the stack remain
      if (!pops_.empty()) {
        for (int32_t k = node.begin + node.num_here; k < node.end; ++k) {
          by_pops(sorted[static_cast<size_t>(k)]);
        }
      }
      return;
    }
    ByteSet allowed;
    for (const Frame& f : here.frames) allowed |= scan_sets_[static_cast<size_t>(f.state)];
    for (int32_t c = node.first_child; c < node.first_child + node.num_children; ++c) {
      const TrieNode& ch = trie[static_cast<size_t>(c)];
      if (allowed.test(ch.byte)) {
        arena_.advance(positions_[d], ch.byte, positions_[d + 1]);
        const bool popped = positions_[d + 1].ended;
        if (popped) pops_.push_back(static_cast<int32_t>(d + 1));
        walk(c, d + 1);
        if (popped) pops_.pop_back();
      } else if (!pops_.empty()) {
        for (int32_t k = ch.begin; k < ch.end; ++k) by_pops(sorted[static_cast<size_t>(k)]);
      }
    }
  }

  // A token the walk cannot carry to its end: uncertain if it leaves the stack at some depth on
  // its path into a byte that may follow the rule, else rejected.
  void by_pops(int32_t id) {
    const std::string_view bytes = v_.bytes(id);
    const size_t first = out_.suffix_ids.size();
    for (int32_t j : pops_) {
      if (static_cast<size_t>(j) < bytes.size() &&
          follow_->test(static_cast<uint8_t>(bytes[static_cast<size_t>(j)]))) {
        std::string suffix(bytes.substr(static_cast<size_t>(j)));
        auto [it, inserted] = suffix_index_.try_emplace(std::move(suffix),
                                                        static_cast<int32_t>(out_.suffixes.size()));
        if (inserted) out_.suffixes.push_back(it->first);
        out_.suffix_ids.push_back(it->second);
      }
    }
    if (out_.suffix_ids.size() == first) return;
    out_.uncertain.push_back(id);
    out_.suffix_begin.push_back(static_cast<int32_t>(out_.suffix_ids.size()));
  }

  // The cheapest exact form of the definite part.
  StateTokens finish() {
    StateTokens out = std::move(out_);
    out.num_accepted = static_cast<int32_t>(accepted_.size());
    const int64_t num_rejected =
        v_.size() - out.num_accepted - static_cast<int64_t>(out.uncertain.size());
    const int64_t bitmask_ids = v_.mask_words();  // one word = one id in size
    if (out.num_accepted <= num_rejected && out.num_accepted <= bitmask_ids) {
      out.kind = StateTokens::Kind::kAcceptedList;
      auto ids = std::make_shared<std::vector<int32_t>>(accepted_);
      std::sort(ids->begin(), ids->end());
      out.ids = std::move(ids);
      return out;
    }
    std::vector<uint32_t> bits(static_cast<size_t>(v_.mask_words()), 0);
    for (int32_t id : accepted_) bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    if (num_rejected <= bitmask_ids) {
      out.kind = StateTokens::Kind::kRejectedList;
      std::vector<uint32_t> decided = bits;
      for (int32_t id : out.uncertain) decided[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
      auto ids = std::make_shared<std::vector<int32_t>>();
      for (int32_t id = 0; id < v_.size(); ++id) {
        if (!((decided[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u)) ids->push_back(id);
      }
      out.ids = std::move(ids);
    } else {
      out.kind = StateTokens::Kind::kBitmask;
      out.bits = std::make_shared<const std::vector<uint32_t>>(std::move(bits));
    }
    return out;
  }

  const Automaton& a_;
  const Vocabulary& v_;
  const std::vector<ByteSet>& scan_sets_;
  StackArena arena_;
  const ByteSet* follow_ = nullptr;
  StateTokens out_;
  std::vector<Position> positions_;
  std::vector<int32_t> pops_;
  std::vector<int32_t> accepted_;
  std::unordered_map<std::string, int32_t> suffix_index_;
};

// The number of states a state of each rule can reach (its rule and every rule it calls,
// transitively): states of rules past the canonical-form limit are not looked up in the cache.
std::vector<int64_t> reachable_states(const Automaton& a) {
  const size_t num_rules = a.rule_start.size();
  std::vector<int64_t> size(num_rules, 0);
  std::vector<std::vector<int32_t>> callees(num_rules);
  for (int32_t s = 0; s < a.num_states(); ++s) {
    const auto r = static_cast<size_t>(a.rule_of[static_cast<size_t>(s)]);
    ++size[r];
    for (int32_t i = a.call_begin[static_cast<size_t>(s)];
         i < a.call_begin[static_cast<size_t>(s) + 1]; ++i) {
      callees[r].push_back(a.calls[static_cast<size_t>(i)].rule);
    }
  }
  std::vector<int64_t> out(num_rules, 0);
  std::vector<char> seen(num_rules);
  for (size_t r = 0; r < num_rules; ++r) {
    std::fill(seen.begin(), seen.end(), 0);
    std::vector<int32_t> stack{static_cast<int32_t>(r)};
    seen[r] = 1;
    while (!stack.empty() && out[r] <= (int64_t{1} << 20)) {
      const auto x = static_cast<size_t>(stack.back());
      stack.pop_back();
      out[r] += size[x];
      for (int32_t y : callees[x]) {
        if (!seen[static_cast<size_t>(y)]) {
          seen[static_cast<size_t>(y)] = 1;
          stack.push_back(y);
        }
      }
    }
  }
  return out;
}

}  // namespace

StateTokens StateTokens::restricted(const ByteSet& follow) const {
  StateTokens out;
  out.kind = kind;
  out.ids = ids;
  out.bits = bits;
  out.num_accepted = num_accepted;
  out.suffix_begin.push_back(0);
  std::vector<int32_t> renumber(suffixes.size(), -1);
  for (size_t i = 0; i < uncertain.size(); ++i) {
    const size_t first = out.suffix_ids.size();
    for (int32_t j = suffix_begin[i]; j < suffix_begin[i + 1]; ++j) {
      const auto k = static_cast<size_t>(suffix_ids[static_cast<size_t>(j)]);
      if (!follow.test(static_cast<uint8_t>(suffixes[k][0]))) continue;
      if (renumber[k] < 0) {
        renumber[k] = static_cast<int32_t>(out.suffixes.size());
        out.suffixes.push_back(suffixes[k]);
      }
      out.suffix_ids.push_back(renumber[k]);
    }
    if (out.suffix_ids.size() == first && kind != Kind::kRejectedList) continue;
    out.uncertain.push_back(uncertain[i]);
    out.suffix_begin.push_back(static_cast<int32_t>(out.suffix_ids.size()));
  }
  return out;
}

std::shared_ptr<const CompiledGrammar> compile_grammar(const Grammar& g,
                                                       std::shared_ptr<const Vocabulary> vocab,
                                                       ThreadPool* pool, StateCache* cache) {
  using Clock = std::chrono::steady_clock;
  auto out = std::make_shared<CompiledGrammar>();
  const auto t0 = Clock::now();
  out->automaton = build_automaton(g);
  const auto t1 = Clock::now();
  out->vocab = std::move(vocab);
  const Automaton& a = out->automaton;
  std::vector<int32_t> scanning;
  std::vector<ByteSet> scan_sets(static_cast<size_t>(a.num_states()));
  for (int32_t s = 0; s < a.num_states(); ++s) {
    if (!a.scans(s)) continue;
    scanning.push_back(s);
    scan_sets[static_cast<size_t>(s)] = a.scan_bytes(s);
  }
  constexpr size_t kMaxCanonicalStates = 128;
  const std::vector<int64_t> reach = cache ? reachable_states(a) : std::vector<int64_t>();
  // Rules without calls are identified whole (their states by number), whatever their size;
  // states of other rules by the part of the automaton they reach, when that is small.
  std::vector<int32_t> local(static_cast<size_t>(a.num_states()), -1);
  std::vector<std::optional<uint64_t>> rule_numbers(a.rule_start.size());
  if (cache) {
    for (size_t r = 0; r < a.rule_start.size(); ++r) {
      if (auto form = rule_form(a, static_cast<int32_t>(r), local)) {
        rule_numbers[r] = cache->rule_number(*form);
      }
    }
  }
  out->states.resize(static_cast<size_t>(a.num_states()));
  // One classifier per worker; states are claimed one at a time (their costs differ widely).
  std::atomic<size_t> next{0};
  std::atomic<int32_t> cached{0};
  auto work = [&](int, int) {
    StateClassifier classifier(a, *out->vocab, scan_sets);
    for (size_t k = next++; k < scanning.size(); k = next++) {
      const int32_t s = scanning[k];
      const ByteSet& follow = a.follow[static_cast<size_t>(a.rule_of[static_cast<size_t>(s)])];
      std::optional<std::vector<uint64_t>> form;
      const auto rule = static_cast<size_t>(a.rule_of[static_cast<size_t>(s)]);
      if (cache && rule_numbers[rule]) {
        form = std::vector<uint64_t>{0xD000000000000000ull, *rule_numbers[rule],
                                     static_cast<uint64_t>(local[static_cast<size_t>(s)])};
      } else if (cache && reach[rule] <= static_cast<int64_t>(kMaxCanonicalStates)) {
        form = canonical_form(a, s, kMaxCanonicalStates);
      }
      if (!form) {
        out->states[static_cast<size_t>(s)] = classifier.classify(s, follow);
        continue;
      }
      // Shared states are classified for any following byte, then restricted to this grammar's.
      std::shared_ptr<const StateTokens> any = cache->find(*form);
      if (any) {
        ++cached;
      } else {
        any = std::make_shared<const StateTokens>(classifier.classify(s, ByteSet().set()));
        cache->insert(std::move(*form), any);
      }
      out->states[static_cast<size_t>(s)] = any->restricted(follow);
    }
  };
  if (pool != nullptr && pool->num_threads() > 1 && scanning.size() > 1) {
    pool->run_on_all(work);
  } else {
    work(0, 1);
  }
  out->stats.num_states = a.num_states();
  out->stats.num_scanning_states = static_cast<int32_t>(scanning.size());
  out->stats.num_cached_states = cached.load();
  for (int32_t s : scanning) {
    out->stats.num_uncertain +=
        static_cast<int64_t>(out->states[static_cast<size_t>(s)].uncertain.size());
  }
  out->stats.automaton_seconds = std::chrono::duration<double>(t1 - t0).count();
  out->stats.masks_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return out;
}

}  // namespace pagoda::structured
