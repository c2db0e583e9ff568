#pragma once
// Parse positions of a pushdown automaton over an Automaton, as persistent stacks.
//
// How it works: a stack is a chain of interned nodes (state, parent), so stacks that share a
// bottom share nodes, a stack is one id, and copying a position copies a few frames. A Frame is a
// stack whose top is not interned (the state changes on every byte; only calls and returns touch
// the node table). A Position holds the frames that can scan the next byte after closing over
// calls (entering a rule) and returns (a final state pops to its parent), plus `ended`: the
// bottom frame returned, i.e. the text so far is complete. Closures are memoized per frame.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "structured/automaton.h"

namespace pagoda::structured {

/// A stack: its top state and the interned node below it (-1: nothing below).
struct Frame {
  int32_t state = 0;
  int32_t parent = -1;
  friend bool operator==(const Frame&, const Frame&) = default;
  friend auto operator<=>(const Frame&, const Frame&) = default;
};

/// Where a parse can be after some text: frames ready to scan a byte (sorted, distinct), and
/// whether a bottom frame has returned (the text may end here).
struct Position {
  std::vector<Frame> frames;
  bool ended = false;
  [[nodiscard]] bool dead() const { return frames.empty() && !ended; }
  friend bool operator==(const Position&, const Position&) = default;
};

/// The node table and closure memo of one matcher (or one precomputation thread).
class StackArena {
 public:
  explicit StackArena(const Automaton& a) : a_(&a) {}

  [[nodiscard]] const Automaton& automaton() const { return *a_; }
  [[nodiscard]] int32_t intern(int32_t state, int32_t parent);
  [[nodiscard]] Frame node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  [[nodiscard]] size_t num_nodes() const { return nodes_.size(); }

  /// Adds the closure of f to out (frames appended unsorted; ended set when the bottom returns).
  void close(Frame f, Position& out);
  /// The position at the start of the text of `rule` on an empty stack.
  [[nodiscard]] Position start(int32_t rule);
  /// out = the position after byte b from in (in.ended plays no part). False when out is dead.
  bool advance(const Position& in, uint8_t b, Position& out);
  /// Whether bytes can follow from `from` (the end may be ended or frames).
  [[nodiscard]] bool accepts(const Position& from, std::string_view bytes);
  /// Forgets every node and memo entry (ids become invalid).
  void clear();

 private:
  void close_uncached(Frame f, std::vector<Frame>& frames, bool& ended);
  static uint64_t key(int32_t state, int32_t parent) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) |
           static_cast<uint32_t>(parent);
  }

  struct Closure {
    int32_t begin = 0, end = 0;  // into memo_frames_
    bool ended = false;
  };
  const Automaton* a_;
  std::vector<Frame> nodes_;
  std::unordered_map<uint64_t, int32_t> index_;
  std::unordered_map<uint64_t, Closure> memo_;
  std::vector<Frame> memo_frames_;
  std::vector<Frame> visit_;  // frames seen by the closure being computed
  std::vector<Position> scratch_;
};

/// Sorts and deduplicates p.frames.
void normalize(Position& p);

}  // namespace pagoda::structured
