#include "structured/compiled_grammar.h"

#include <atomic>
#include <chrono>
#include <unordered_map>

#include "core/status.h"
#include "core/thread_pool.h"
#include "structured/stack_arena.h"

namespace pagoda::structured {
namespace {

enum : uint8_t { kRejected = 0, kAccepted = 1, kUncertain = 2 };

// Classifies every token at one scanning state by a walk over the sorted vocabulary. positions[d]
// is the parse after the first d bytes of the current token, from a stack holding the state alone
// (-1 below it stands for whatever the real stack holds); consecutive tokens share their common
// prefix's positions. `pops` are the depths at which the walk returned below that stack with
// bytes left: the uncertain exits.
class StateClassifier {
 public:
  StateClassifier(const Automaton& a, const Vocabulary& v) : a_(a), v_(v), arena_(a) {}

  StateTokens classify(int32_t state) {
    arena_.clear();
    const ByteSet& follow = a_.follow[static_cast<size_t>(a_.rule_of[static_cast<size_t>(state)])];
    const auto& sorted = v_.sorted();
    const auto& lcp = v_.lcp();
    cls_.assign(static_cast<size_t>(v_.size()), kRejected);
    StateTokens out;
    std::unordered_map<std::string, int32_t> suffix_index;
    out.suffix_begin.push_back(0);
    if (positions_.size() < static_cast<size_t>(v_.max_token_bytes()) + 1) {
      positions_.resize(static_cast<size_t>(v_.max_token_bytes()) + 1);
    }
    positions_[0].frames.assign(1, Frame{state, -1});
    positions_[0].ended = false;
    pops_.clear();
    size_t valid = 0;  // positions_[0..valid] belong to the current path
    auto classify_by_pops = [&](int32_t id, std::string_view bytes) {
      std::vector<int32_t> ids;
      for (int32_t j : pops_) {
        if (static_cast<size_t>(j) < bytes.size() &&
            follow.test(static_cast<uint8_t>(bytes[static_cast<size_t>(j)]))) {
          std::string suffix(bytes.substr(static_cast<size_t>(j)));
          auto [it, inserted] = suffix_index.try_emplace(std::move(suffix),
                                                         static_cast<int32_t>(out.suffixes.size()));
          if (inserted) out.suffixes.push_back(it->first);
          ids.push_back(it->second);
        }
      }
      if (ids.empty()) return;
      cls_[static_cast<size_t>(id)] = kUncertain;
      out.uncertain.push_back(id);
      out.suffix_ids.insert(out.suffix_ids.end(), ids.begin(), ids.end());
      out.suffix_begin.push_back(static_cast<int32_t>(out.suffix_ids.size()));
    };
    for (size_t i = 0; i < sorted.size(); ++i) {
      const int32_t id = sorted[i];
      const std::string_view bytes = v_.bytes(id);
      size_t d = std::min(static_cast<size_t>(lcp[i]), valid);
      while (!pops_.empty() && static_cast<size_t>(pops_.back()) > d) pops_.pop_back();
      bool dead = false;
      while (d < bytes.size()) {
        if (positions_[d].frames.empty()) {
          dead = true;
          break;
        }
        arena_.advance(positions_[d], static_cast<uint8_t>(bytes[d]), positions_[d + 1]);
        ++d;
        // A return at the token's end accepts it; longer tokens on this prefix exit here.
        if (positions_[d].ended) pops_.push_back(static_cast<int32_t>(d));
      }
      valid = d;
      if (!dead && !positions_[d].dead()) {
        cls_[static_cast<size_t>(id)] = kAccepted;
        ++out.num_accepted;
        continue;
      }
      classify_by_pops(id, bytes);
      if (!dead) continue;
      // Every following token with this dead prefix ends the same way, but for its own exits.
      while (i + 1 < sorted.size() && static_cast<size_t>(lcp[i + 1]) >= d) {
        ++i;
        classify_by_pops(sorted[i], v_.bytes(sorted[i]));
      }
    }
    // The cheapest exact form of the definite part.
    const int64_t num_rejected =
        v_.size() - out.num_accepted - static_cast<int64_t>(out.uncertain.size());
    const int64_t bitmask_ids = v_.mask_words();  // one word = one id in size
    if (out.num_accepted <= num_rejected && out.num_accepted <= bitmask_ids) {
      out.kind = StateTokens::Kind::kAcceptedList;
      for (int32_t id : sorted) {
        if (cls_[static_cast<size_t>(id)] == kAccepted) out.ids.push_back(id);
      }
      std::sort(out.ids.begin(), out.ids.end());
    } else if (num_rejected <= bitmask_ids) {
      out.kind = StateTokens::Kind::kRejectedList;
      for (int32_t id = 0; id < v_.size(); ++id) {
        if (cls_[static_cast<size_t>(id)] == kRejected) out.ids.push_back(id);
      }
    } else {
      out.kind = StateTokens::Kind::kBitmask;
      out.bits.assign(static_cast<size_t>(v_.mask_words()), 0);
      for (int32_t id : sorted) {
        if (cls_[static_cast<size_t>(id)] == kAccepted) {
          out.bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
        }
      }
    }
    return out;
  }

 private:
  const Automaton& a_;
  const Vocabulary& v_;
  StackArena arena_;
  std::vector<Position> positions_;
  std::vector<int32_t> pops_;
  std::vector<uint8_t> cls_;
};

}  // namespace

std::shared_ptr<const CompiledGrammar> compile_grammar(const Grammar& g,
                                                       std::shared_ptr<const Vocabulary> vocab,
                                                       ThreadPool* pool) {
  using Clock = std::chrono::steady_clock;
  auto out = std::make_shared<CompiledGrammar>();
  const auto t0 = Clock::now();
  out->automaton = build_automaton(g);
  const auto t1 = Clock::now();
  out->vocab = std::move(vocab);
  const Automaton& a = out->automaton;
  std::vector<int32_t> scanning;
  for (int32_t s = 0; s < a.num_states(); ++s) {
    if (a.scans(s)) scanning.push_back(s);
  }
  out->states.resize(static_cast<size_t>(a.num_states()));
  // One classifier per worker; states are claimed one at a time (their costs differ widely).
  std::atomic<size_t> next{0};
  auto work = [&](int, int) {
    StateClassifier classifier(a, *out->vocab);
    for (size_t k = next++; k < scanning.size(); k = next++) {
      out->states[static_cast<size_t>(scanning[k])] = classifier.classify(scanning[k]);
    }
  };
  if (pool != nullptr && pool->num_threads() > 1 && scanning.size() > 1) {
    pool->run_on_all(work);
  } else {
    work(0, 1);
  }
  out->stats.num_states = a.num_states();
  out->stats.num_scanning_states = static_cast<int32_t>(scanning.size());
  for (int32_t s : scanning) {
    out->stats.num_uncertain +=
        static_cast<int64_t>(out->states[static_cast<size_t>(s)].uncertain.size());
  }
  out->stats.automaton_seconds = std::chrono::duration<double>(t1 - t0).count();
  out->stats.masks_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return out;
}

}  // namespace pagoda::structured
