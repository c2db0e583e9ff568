#include "structured/stack_arena.h"

#include <algorithm>

namespace pagoda::structured {

void normalize(Position& p) {
  if (p.frames.size() < 2) return;
  std::sort(p.frames.begin(), p.frames.end());
  p.frames.erase(std::unique(p.frames.begin(), p.frames.end()), p.frames.end());
}

int32_t StackArena::intern(int32_t state, int32_t parent) {
  auto [it, inserted] = index_.try_emplace(key(state, parent), static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back(Frame{state, parent});
  return it->second;
}

void StackArena::close_uncached(Frame f, std::vector<Frame>& frames, bool& ended) {
  // visit_ keeps closures finite where a nullable rule is called in a loop.
  if (std::find(visit_.begin(), visit_.end(), f) != visit_.end()) return;
  visit_.push_back(f);
  const Automaton& a = *a_;
  const uint8_t flags = a.flags[static_cast<size_t>(f.state)];
  if (flags & Automaton::kScans) frames.push_back(f);
  if (flags & Automaton::kCalls) {
    const auto begin = static_cast<size_t>(a.call_begin[static_cast<size_t>(f.state)]);
    const auto end = static_cast<size_t>(a.call_begin[static_cast<size_t>(f.state) + 1]);
    for (size_t i = begin; i < end; ++i) {
      const Call& call = a.calls[i];
      const int32_t parent = call.tail ? f.parent : intern(call.ret, f.parent);
      close_uncached(Frame{a.rule_start[static_cast<size_t>(call.rule)], parent}, frames, ended);
    }
  }
  if (flags & Automaton::kFinal) {
    if (f.parent < 0) {
      ended = true;
    } else {
      close_uncached(node(f.parent), frames, ended);
    }
  }
}

void StackArena::close(Frame f, Position& out) {
  const uint8_t flags = a_->flags[static_cast<size_t>(f.state)];
  // The common cases need no memo: a state with no calls that does not return to a frame below
  // (inside a rule's own loop, or where the bottom frame may end).
  if (!(flags & Automaton::kCalls) && (!(flags & Automaton::kFinal) || f.parent < 0)) {
    if (flags & Automaton::kScans) out.frames.push_back(f);
    if (flags & Automaton::kFinal) out.ended = true;
    return;
  }
  const uint64_t k = key(f.state, f.parent);
  auto it = memo_.find(k);
  if (it == memo_.end()) {
    std::vector<Frame> frames;
    bool ended = false;
    visit_.clear();
    close_uncached(f, frames, ended);
    Closure c;
    c.begin = static_cast<int32_t>(memo_frames_.size());
    memo_frames_.insert(memo_frames_.end(), frames.begin(), frames.end());
    c.end = static_cast<int32_t>(memo_frames_.size());
    c.ended = ended;
    it = memo_.emplace(k, c).first;
  }
  const Closure& c = it->second;
  out.frames.insert(out.frames.end(), memo_frames_.begin() + c.begin, memo_frames_.begin() + c.end);
  out.ended = out.ended || c.ended;
}

Position StackArena::start(int32_t rule) {
  Position p;
  close(Frame{a_->rule_start[static_cast<size_t>(rule)], -1}, p);
  normalize(p);
  return p;
}

bool StackArena::advance(const Position& in, uint8_t b, Position& out) {
  out.frames.clear();
  out.ended = false;
  for (const Frame& f : in.frames) {
    const int32_t t = a_->step(f.state, b);
    if (t >= 0) close(Frame{t, f.parent}, out);
  }
  normalize(out);
  return !out.dead();
}

bool StackArena::accepts(const Position& from, std::string_view bytes) {
  if (bytes.empty()) return !from.dead();
  if (scratch_.size() < 2) scratch_.resize(2);
  const Position* cur = &from;
  for (size_t i = 0; i < bytes.size(); ++i) {
    Position& next = scratch_[i & 1];
    if (!advance(*cur, static_cast<uint8_t>(bytes[i]), next)) return false;
    cur = &next;
  }
  return true;
}

void StackArena::clear() {
  nodes_.clear();
  index_.clear();
  memo_.clear();
  memo_frames_.clear();
}

}  // namespace pagoda::structured
