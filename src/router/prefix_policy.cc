#include "router/prefix_policy.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda::router {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

/// FNV-1a over the previous block's hash (8 bytes, little end first) then the block's bytes:
/// stable across runs and machines, so two routers agree on the same prompt.
uint64_t chain_hash(uint64_t previous, std::string_view block) {
  uint64_t h = kFnvOffset;
  for (int i = 0; i < 8; ++i) {
    h = (h ^ ((previous >> (8 * i)) & 0xff)) * kFnvPrime;
  }
  for (unsigned char c : block) h = (h ^ c) * kFnvPrime;
  return h;
}

}  // namespace

std::vector<uint64_t> prefix_block_hashes(std::string_view text, size_t block_chars) {
  PAGODA_CHECK(block_chars >= 1, "block_chars must be >= 1");
  std::vector<uint64_t> hashes;
  hashes.reserve(text.size() / block_chars);
  uint64_t previous = 0;
  for (size_t at = 0; at + block_chars <= text.size(); at += block_chars) {
    previous = chain_hash(previous, text.substr(at, block_chars));
    hashes.push_back(previous);
  }
  return hashes;
}

BlockLru::BlockLru(size_t capacity) : capacity_(capacity) {
  PAGODA_CHECK(capacity >= 1, "a block LRU needs room for one hash");
}

void BlockLru::touch(uint64_t hash) {
  if (auto it = index_.find(hash); it != index_.end()) {
    order_.splice(order_.begin(), order_, it->second);
    return;
  }
  if (index_.size() == capacity_) {
    index_.erase(order_.back());
    order_.pop_back();
  }
  order_.push_front(hash);
  index_.emplace(hash, order_.begin());
}

void BlockLru::clear() {
  order_.clear();
  index_.clear();
}

const char* route_reason_name(RouteReason reason) {
  switch (reason) {
    case RouteReason::kPrefixHit:
      return "prefix_hit";
    case RouteReason::kLoadBalanced:
      return "load_balanced";
    case RouteReason::kLeastLoaded:
      return "least_loaded";
  }
  return "unknown";
}

PrefixPolicy::PrefixPolicy(size_t num_backends, PrefixPolicyOptions options) : options_(options) {
  if (options_.balance_abs_threshold < 0) {
    throw InvalidArgument("the balance absolute threshold must be >= 0");
  }
  if (!(options_.balance_rel_threshold >= 1.0)) {
    throw InvalidArgument("the balance relative threshold must be >= 1");
  }
  if (options_.max_blocks_per_backend < 1) {
    throw InvalidArgument("each backend must remember at least one prefix block");
  }
  blocks_.reserve(num_backends);
  for (size_t i = 0; i < num_backends; ++i) blocks_.emplace_back(options_.max_blocks_per_backend);
}

size_t PrefixPolicy::matched_blocks(size_t b, const std::vector<uint64_t>& hashes) const {
  size_t n = 0;
  while (n < hashes.size() && blocks_[b].contains(hashes[n])) ++n;
  return n;
}

size_t PrefixPolicy::least_loaded(const std::vector<size_t>& candidates,
                                  const std::vector<BackendState>& backends) {
  int64_t lowest = backends[candidates.front()].in_flight;
  for (size_t b : candidates) lowest = std::min(lowest, backends[b].in_flight);
  std::vector<size_t> tied;
  for (size_t b : candidates) {
    if (backends[b].in_flight == lowest) tied.push_back(b);
  }
  return tied[round_robin_++ % tied.size()];
}

bool PrefixPolicy::choose(const std::vector<uint64_t>& hashes,
                          const std::vector<BackendState>& backends, RouteDecision& decision) {
  PAGODA_CHECK(backends.size() == blocks_.size(), "{} backend states for {} backends",
               backends.size(), blocks_.size());
  std::vector<size_t> eligible;
  for (size_t b = 0; b < backends.size(); ++b) {
    if (backends[b].eligible) eligible.push_back(b);
  }
  if (eligible.empty()) return false;

  // Rule 1: the longest match; rule 3 when nothing matches.
  size_t best = 0;
  std::vector<size_t> matching;
  for (size_t b : eligible) {
    const size_t m = matched_blocks(b, hashes);
    if (m == 0 || m < best) continue;
    if (m > best) matching.clear();
    best = m;
    matching.push_back(b);
  }
  int64_t least_load = backends[eligible.front()].in_flight;
  for (size_t b : eligible) least_load = std::min(least_load, backends[b].in_flight);
  if (matching.empty()) {
    decision = {least_loaded(eligible, backends), RouteReason::kLeastLoaded, 0};
  } else {
    const size_t hit = least_loaded(matching, backends);
    // Rule 2: a match on a backend far busier than the least loaded one spills over.
    const int64_t hit_load = backends[hit].in_flight;
    const bool imbalanced = hit_load - least_load > options_.balance_abs_threshold &&
                            static_cast<double>(hit_load) >
                                options_.balance_rel_threshold * static_cast<double>(least_load);
    if (imbalanced) {
      const size_t least = least_loaded(eligible, backends);
      decision = {least, RouteReason::kLoadBalanced, matched_blocks(least, hashes)};
    } else {
      decision = {hit, RouteReason::kPrefixHit, best};
    }
  }
  // Last block first: a prefix stays in the set longer than its extensions, so that a match,
  // which counts from the first block, survives evictions as long as possible.
  for (auto it = hashes.rbegin(); it != hashes.rend(); ++it) blocks_[decision.backend].touch(*it);
  return true;
}

}  // namespace pagoda::router
