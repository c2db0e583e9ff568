#pragma once
// The router's choice of a backend for one request: prefix-cache-aware, bounded by load.
//
// How it works. The request's prompt text is cut into blocks of `block_chars` characters; block i
// gets a cumulative hash h_i = H(h_{i-1}, block i), so h_i names the whole prefix up to the end of
// block i (only whole blocks count: a prompt shorter than one block has none). Each backend keeps
// a bounded LRU set of the hashes of the requests it was sent. For a new request, a backend's
// match is the number of leading hashes it holds (h_0, h_1, ... up to the first miss): the
// engine behind it most likely still has that prefix in its KV cache. Among the healthy backends:
//   1. the ones with the longest match (at least one block) are the candidates, and of these the
//      least loaded (requests in flight) wins;
//   2. unless that backend is too busy next to the least-loaded healthy backend: when
//      in_flight(match) - in_flight(least) > abs_threshold and
//      in_flight(match) > rel_threshold * in_flight(least), the request goes to the least loaded
//      instead (a hot prefix spills over rather than queueing on one engine);
//   3. with no match, the least loaded.
// Ties between equally loaded backends go round robin. The chosen backend then holds every block
// hash of the request (inserted or refreshed in its LRU set), whichever rule chose it.
// SGLang's cache-aware router and vLLM's production-stack router decide the same way in spirit
// (longest cached prefix unless the load is out of balance); this one matches on text blocks
// rather than a radix tree of characters or tokens.
#include <cstddef>
#include <cstdint>
#include <list>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pagoda::router {

/// The cumulative hashes of the whole `block_chars`-character blocks of `text` (block_chars >= 1).
/// Example: block_chars 4, "abcdefghij" -> {H(0, "abcd"), H(h0, "efgh")}; "ij" is not a block.
[[nodiscard]] std::vector<uint64_t> prefix_block_hashes(std::string_view text, size_t block_chars);

/// A bounded set of block hashes, evicting the least recently inserted or touched one.
class BlockLru {
 public:
  explicit BlockLru(size_t capacity);

  /// Adds `hash`, or marks it most recently used if present.
  void touch(uint64_t hash);
  [[nodiscard]] bool contains(uint64_t hash) const { return index_.count(hash) != 0; }
  [[nodiscard]] size_t size() const { return index_.size(); }
  void clear();

 private:
  size_t capacity_;
  std::list<uint64_t> order_;  // most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> index_;
};

/// The thresholds of rule 2 and the size of each backend's hash set.
struct PrefixPolicyOptions {
  int64_t balance_abs_threshold = 32;
  double balance_rel_threshold = 1.5;
  size_t max_blocks_per_backend = 1 << 16;
};

/// What a backend looks like to the policy at the moment of choosing.
struct BackendState {
  bool eligible = false;  // healthy and not already tried by this request
  int64_t in_flight = 0;
};

/// Why a backend was chosen (a label of the router's routing counter).
enum class RouteReason { kPrefixHit, kLoadBalanced, kLeastLoaded };
[[nodiscard]] const char* route_reason_name(RouteReason reason);

struct RouteDecision {
  size_t backend = 0;
  RouteReason reason = RouteReason::kLeastLoaded;
  size_t matched_blocks = 0;  // of the chosen backend
};

/// The policy's state: one hash set per backend and the round-robin counter. Not thread-safe:
/// the backend pool calls it under its lock.
class PrefixPolicy {
 public:
  PrefixPolicy(size_t num_backends, PrefixPolicyOptions options);

  /// Chooses among the eligible backends (`backends` has one entry per backend); returns false
  /// when none is eligible. Records the request's hashes on the chosen backend.
  bool choose(const std::vector<uint64_t>& hashes, const std::vector<BackendState>& backends,
              RouteDecision& decision);

  /// The number of leading `hashes` backend `b` holds.
  [[nodiscard]] size_t matched_blocks(size_t b, const std::vector<uint64_t>& hashes) const;

 private:
  /// The least-loaded of `candidates` (indices into `backends`), ties round robin.
  size_t least_loaded(const std::vector<size_t>& candidates,
                      const std::vector<BackendState>& backends);

  PrefixPolicyOptions options_;
  std::vector<BlockLru> blocks_;
  uint64_t round_robin_ = 0;
};

}  // namespace pagoda::router
