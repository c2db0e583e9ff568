#include "engine/speculation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/status.h"

namespace pagoda {

bool drafts_in_executor(const std::string& method) {
  return method == "draft_model" || method == "parallel_draft" || method == "eagle" ||
         method == "eagle3";
}

void validate_speculative_config(const SpeculativeConfig& c) {
  if (c.method != "ngram" && !drafts_in_executor(c.method)) {
    throw InvalidArgument(fmt::format(
        "speculative method '{}' is not supported (ngram, draft_model, parallel_draft, eagle, "
        "eagle3)",
        c.method));
  }
  if (drafts_in_executor(c.method) && c.model.empty()) {
    throw InvalidArgument(
        fmt::format("speculative_config.model: method {} needs the draft's directory", c.method));
  }
  if (c.bench_acceptance_rate &&
      !(*c.bench_acceptance_rate >= 0 && *c.bench_acceptance_rate <= 1)) {
    throw InvalidArgument(
        fmt::format("bench_acceptance_rate must be in [0, 1], got {}", *c.bench_acceptance_rate));
  }
  // 1 + K rows per sequence must fit a decode graph (up to 16 tokens per sequence).
  if (c.num_speculative_tokens < 1 || c.num_speculative_tokens > 15) {
    throw InvalidArgument(
        fmt::format("num_speculative_tokens must be in [1, 15], got {}", c.num_speculative_tokens));
  }
  if (c.prompt_lookup_min < 1) {
    throw InvalidArgument(
        fmt::format("prompt_lookup_min must be >= 1, got {}", c.prompt_lookup_min));
  }
  if (c.prompt_lookup_max < c.prompt_lookup_min) {
    throw InvalidArgument(fmt::format("prompt_lookup_min={} must be <= prompt_lookup_max={}",
                                      c.prompt_lookup_min, c.prompt_lookup_max));
  }
  if (!(c.draft_row_cost >= 0 && c.draft_row_cost <= 10)) {
    throw InvalidArgument(
        fmt::format("draft_row_cost must be in [0, 10], got {}", c.draft_row_cost));
  }
}

double SpeculationLength::tokens_per_cost(double a, int k, double c) {
  double tokens = 0, term = 1;  // 1 + a + ... + a^k
  for (int i = 0; i <= k; ++i, term *= a) tokens += term;
  return tokens / (1 + c * k);
}

int SpeculationLength::choose(int max_k, bool adaptive, double draft_row_cost) {
  std::vector<double> relative_cost(static_cast<size_t>(std::max(max_k, 0)) + 1);
  for (size_t k = 0; k < relative_cost.size(); ++k)
    relative_cost[k] = 1 + draft_row_cost * static_cast<double>(k);
  return choose(max_k, adaptive, relative_cost);
}

int SpeculationLength::choose(int max_k, bool adaptive, std::span<const double> relative_cost) {
  probed_ = false;
  if (!adaptive) return max_k;
  PAGODA_CHECK(relative_cost.size() > static_cast<size_t>(std::max(max_k, 0)),
               "choose: {} costs for lengths 0..{}", relative_cost.size(), max_k);
  auto value = [&](int k) {
    double tokens = 0, term = 1;  // 1 + a + ... + a^k
    for (int i = 0; i <= k; ++i, term *= acceptance_) tokens += term;
    return tokens / relative_cost[static_cast<size_t>(k)];
  };
  int best = 0;
  double best_value = value(0);
  for (int k = 1; k <= max_k; ++k) {
    const double v = value(k);
    if (v > best_value * (1 + 1e-9)) {  // a tie keeps the shorter length
      best = k;
      best_value = v;
    }
  }
  if (best == 0 && max_k > 0 && ++idle_steps_ >= probe_interval_) {
    idle_steps_ = 0;
    probed_ = true;
    return 1;  // a probe
  }
  return best;
}

void SpeculationLength::observe(int drafts, int accepted) {
  // Drafts 0..accepted-1 held (1 each); draft `accepted`, if there was one, failed (0); the
  // drafts after it were never judged.
  for (int i = 0; i < accepted; ++i) acceptance_ += kWeight * (1 - acceptance_);
  if (accepted < drafts) acceptance_ -= kWeight * acceptance_;
  // The last choice (this verification's) was a probe: back off while probes fail.
  if (accepted > 0) {
    probe_interval_ = kProbeInterval;
  } else if (probed_) {
    probe_interval_ = std::min(2 * probe_interval_, kMaxProbeInterval);
  }
}

void SpeculationCounters::add(int drafts, int accepted) {
  if (drafts <= 0) return;
  ++num_drafts;
  num_draft_tokens += drafts;
  num_accepted_tokens += accepted;
  if (accepted_per_pos.size() < static_cast<size_t>(drafts))
    accepted_per_pos.resize(static_cast<size_t>(drafts), 0);
  for (int i = 0; i < accepted; ++i) ++accepted_per_pos[static_cast<size_t>(i)];
}

}  // namespace pagoda
