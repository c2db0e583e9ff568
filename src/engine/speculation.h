#pragma once
// Speculative decoding in the engine: the configuration's checks, and how many drafts each
// request asks for (adaptive speculation length).
//
// Adaptive length, how it works. Each completion keeps an exponentially weighted estimate a of
// the probability that a draft is accepted given that the drafts before it were (its EWMA over
// the drafts it verified: each accepted draft is a 1, the first rejected one a 0, the drafts
// after it unobserved). With k drafts the step keeps 1 + a + a^2 + ... + a^k tokens on average
// (the sampled token, then each draft while all before it held) and costs 1 + c k relative to a
// plain step (c = SpeculativeConfig::draft_row_cost: each row's share of the step; on a GPU at
// small batches the weights are read once for all rows, so c is small). choose() takes the k in
// 0..K with the most tokens per cost. Example, c = 0.1, K = 4: a = 0.8 gives tokens per cost
// 1, 1.636, 2.033, 2.271, 2.401 for k = 0..4: k = 4; a = 0.3 gives 1, 1.182, 1.158, ...: k = 1;
// a = 0.05 gives k = 0. A request at k = 0 verifies one draft every kProbeInterval steps so that
// its estimate can recover; a probe rejected doubles that interval (up to kMaxProbeInterval), an
// accepted draft restores it. The estimate starts at kPrior.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pagoda/engine_args.h"

namespace pagoda {

/// Throws InvalidArgument naming the key (vLLM's names) of what the engine cannot do.
void validate_speculative_config(const SpeculativeConfig& config);

/// Whether a method's drafts come from a model in the executor (draft_model, parallel_draft,
/// eagle, eagle3): the engine plans placeholders that the executor fills.
[[nodiscard]] bool drafts_in_executor(const std::string& method);

/// One completion's acceptance estimate and its choice of k.
class SpeculationLength {
 public:
  static constexpr double kPrior = 0.5;
  static constexpr double kWeight = 0.1;  // of each observed draft in the EWMA
  static constexpr int kProbeInterval = 8;
  static constexpr int kMaxProbeInterval = 64;

  /// The number of drafts to ask for now, in 0..max_k (always max_k unless adaptive). Counts the
  /// steps at 0 towards the next probe.
  [[nodiscard]] int choose(int max_k, bool adaptive, double draft_row_cost);
  /// choose() with each length's cost relative to no drafts: relative_cost [max_k + 1]
  /// (engine/speculation_costs.h measures them), in place of 1 + c k.
  [[nodiscard]] int choose(int max_k, bool adaptive, std::span<const double> relative_cost);
  /// Whether the last choose() returned a probe (1 draft at an estimate that chose 0).
  [[nodiscard]] bool probed() const { return probed_; }
  /// The probe the last choose() returned was not run: the next choose() asks again.
  void defer_probe() {
    probed_ = false;
    idle_steps_ = probe_interval_ - 1;
  }
  /// A step verified `drafts` drafts and kept the first `accepted` of them.
  void observe(int drafts, int accepted);
  [[nodiscard]] double acceptance() const { return acceptance_; }

  /// The expected tokens per step cost of k drafts at acceptance a and row cost c.
  [[nodiscard]] static double tokens_per_cost(double a, int k, double c);

 private:
  double acceptance_ = kPrior;
  int idle_steps_ = 0;
  int probe_interval_ = kProbeInterval;
  bool probed_ = false;
};

/// vLLM's spec_decode counters, summed over the engine's steps.
struct SpeculationCounters {
  int64_t num_drafts = 0;        // verifications: (request, step) pairs with drafts
  int64_t num_draft_tokens = 0;  // drafts verified
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> accepted_per_pos;  // [K]: drafts accepted at each position

  /// Adds one verification of `drafts` drafts of which the first `accepted` were kept.
  void add(int drafts, int accepted);
};

}  // namespace pagoda
