#include "structured/state_cache.h"

#include <algorithm>
#include <unordered_map>

namespace pagoda::structured {
namespace {

void push_bytes(std::vector<uint64_t>& out, const ByteSet& set) {
  for (int w = 0; w < 4; ++w) {
    uint64_t word = 0;
    for (int b = 0; b < 64; ++b) {
      if (set.test(static_cast<size_t>(w * 64 + b))) word |= uint64_t{1} << b;
    }
    out.push_back(word);
  }
}

}  // namespace

std::optional<std::vector<uint64_t>> canonical_form(const Automaton& a, int32_t state,
                                                    size_t max_states) {
  // Breadth-first from state; each state is numbered when first met, its edges listed by target
  // in the order of their lowest byte, so equal structures give equal forms.
  std::vector<uint64_t> form;
  std::unordered_map<int32_t, uint64_t> local;
  std::vector<int32_t> order;
  auto id = [&](int32_t s) {
    auto [it, inserted] = local.try_emplace(s, order.size());
    if (inserted) order.push_back(s);
    return it->second;
  };
  (void)id(state);
  std::vector<std::pair<int32_t, ByteSet>> groups;
  for (size_t k = 0; k < order.size(); ++k) {
    if (order.size() > max_states) return std::nullopt;
    const int32_t s = order[k];
    const auto calls_begin = a.call_begin[static_cast<size_t>(s)];
    const auto calls_end = a.call_begin[static_cast<size_t>(s) + 1];
    if (calls_end - calls_begin > 1) return std::nullopt;
    form.push_back(0xF000000000000000ull | a.flags[static_cast<size_t>(s)]);
    groups.clear();
    for (int32_t c = 0; c < a.num_classes; ++c) {
      const int32_t t = a.next[static_cast<size_t>(s) * static_cast<size_t>(a.num_classes) +
                               static_cast<size_t>(c)];
      if (t < 0) continue;
      auto it =
          std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == t; });
      if (it == groups.end()) {
        groups.emplace_back(t, ByteSet());
        it = groups.end() - 1;
      }
      it->second |= a.class_bytes[static_cast<size_t>(c)];
    }
    std::sort(groups.begin(), groups.end(), [](const auto& x, const auto& y) {
      return x.second._Find_first() < y.second._Find_first();
    });
    for (const auto& [t, bytes] : groups) {
      form.push_back(id(t));
      push_bytes(form, bytes);
    }
    if (calls_end > calls_begin) {
      const Call& call = a.calls[static_cast<size_t>(calls_begin)];
      form.push_back(0xE000000000000000ull | (call.tail ? 1 : 0));
      form.push_back(id(a.rule_start[static_cast<size_t>(call.rule)]));
      form.push_back(id(call.ret));
    }
  }
  return form;
}

std::optional<std::vector<uint64_t>> rule_form(const Automaton& a, int32_t rule,
                                               std::vector<int32_t>& local) {
  const int32_t start = a.rule_start[static_cast<size_t>(rule)];
  std::vector<uint64_t> form;
  std::vector<int32_t> order{start};
  local[static_cast<size_t>(start)] = 0;
  std::vector<std::pair<int32_t, ByteSet>> groups;
  for (size_t k = 0; k < order.size(); ++k) {
    const int32_t s = order[k];
    if (a.calls_out(s)) return std::nullopt;
    form.push_back(0xF000000000000000ull | a.flags[static_cast<size_t>(s)]);
    groups.clear();
    for (int32_t c = 0; c < a.num_classes; ++c) {
      const int32_t t = a.next[static_cast<size_t>(s) * static_cast<size_t>(a.num_classes) +
                               static_cast<size_t>(c)];
      if (t < 0) continue;
      auto it =
          std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == t; });
      if (it == groups.end()) {
        groups.emplace_back(t, ByteSet());
        it = groups.end() - 1;
      }
      it->second |= a.class_bytes[static_cast<size_t>(c)];
    }
    std::sort(groups.begin(), groups.end(), [](const auto& x, const auto& y) {
      return x.second._Find_first() < y.second._Find_first();
    });
    for (const auto& [t, bytes] : groups) {
      if (local[static_cast<size_t>(t)] < 0) {
        local[static_cast<size_t>(t)] = static_cast<int32_t>(order.size());
        order.push_back(t);
      }
      form.push_back(static_cast<uint64_t>(local[static_cast<size_t>(t)]));
      push_bytes(form, bytes);
    }
  }
  return form;
}

uint64_t StateCache::rule_number(const std::vector<uint64_t>& form) {
  std::lock_guard lock(mutex_);
  return rules_.try_emplace(form, rules_.size()).first->second;
}

size_t StateCache::Hash::operator()(const std::vector<uint64_t>& v) const {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t x : v) h = (h ^ x) * 1099511628211ull;
  return h;
}

std::shared_ptr<const StateTokens> StateCache::find(const std::vector<uint64_t>& form) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(form);
  return it == entries_.end() ? nullptr : it->second;
}

void StateCache::insert(std::vector<uint64_t> form, std::shared_ptr<const StateTokens> tokens) {
  std::lock_guard lock(mutex_);
  if (entries_.size() >= capacity_) return;
  entries_.emplace(std::move(form), std::move(tokens));
}

size_t StateCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace pagoda::structured
