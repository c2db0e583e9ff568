#include "engine/speculation_costs.h"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda {

SpeculationCosts::SpeculationCosts(int max_k, double prior_row_cost)
    : max_k_(std::max(max_k, 0)),
      prior_row_cost_(prior_row_cost),
      keys_(kBuckets, std::vector<Key>(static_cast<size_t>(std::max(max_k, 0)) + 1)),
      steps_(kBuckets, 0) {}

int SpeculationCosts::bucket(int batch) {
  // 1 -> 0, 2 -> 1, 3..4 -> 2, 5..8 -> 3, ...
  const auto b = static_cast<unsigned>(std::max(batch, 1));
  return std::min(static_cast<int>(std::bit_width(b - 1)), kBuckets - 1);
}

void SpeculationCosts::observe(int batch, int k, double seconds) {
  if (k < 0 || k > max_k_ || !(seconds > 0)) return;
  Key& key = keys_[static_cast<size_t>(bucket(batch))][static_cast<size_t>(k)];
  if (key.skipped < kSkipped) {
    ++key.skipped;
    return;
  }
  if (key.samples > 0 && seconds > kOutlier * key.seconds) return;
  key.seconds = key.samples == 0 ? seconds : key.seconds + kWeight * (seconds - key.seconds);
  ++key.samples;
}

bool SpeculationCosts::measured(int batch, int k) const {
  return k >= 0 && k <= max_k_ &&
         keys_[static_cast<size_t>(bucket(batch))][static_cast<size_t>(k)].samples > 0;
}

double SpeculationCosts::relative_cost(int batch, int k) const {
  PAGODA_CHECK(k >= 0 && k <= max_k_, "relative_cost: k {} outside 0..{}", k, max_k_);
  if (k == 0) return 1.0;
  const std::vector<Key>& keys = keys_[static_cast<size_t>(bucket(batch))];
  const double t0 = keys[0].seconds;
  if (keys[0].samples == 0) return 1.0 + prior_row_cost_ * k;
  if (keys[static_cast<size_t>(k)].samples > 0) return keys[static_cast<size_t>(k)].seconds / t0;
  // The nearest measured lengths below (0 at least) and above k.
  int lo = 0, hi = -1;
  for (int j = k - 1; j >= 1; --j) {
    if (keys[static_cast<size_t>(j)].samples > 0) {
      lo = j;
      break;
    }
  }
  for (int j = k + 1; j <= max_k_; ++j) {
    if (keys[static_cast<size_t>(j)].samples > 0) {
      hi = j;
      break;
    }
  }
  const double t_lo = keys[static_cast<size_t>(lo)].seconds;
  double t = 0;
  if (hi > 0) {
    t = t_lo + (keys[static_cast<size_t>(hi)].seconds - t_lo) * (k - lo) / (hi - lo);
  } else if (lo > 0) {
    t = t0 + (t_lo - t0) * k / lo;  // the slope from k = 0 to the measured length below
  } else {
    return 1.0 + prior_row_cost_ * k;
  }
  return std::max(t, t0) / t0;
}

std::string SpeculationCosts::describe() const {
  std::string out;
  for (size_t b = 0; b < keys_.size(); ++b) {
    std::string line;
    for (size_t k = 0; k < keys_[b].size(); ++k) {
      const Key& key = keys_[b][k];
      if (key.samples == 0) continue;
      line += fmt::format("{}k={} {:.3f} ms (n {})", line.empty() ? "" : ", ", k, 1e3 * key.seconds,
                          key.samples);
    }
    if (!line.empty())
      out += fmt::format("{}batch <= {}: {}", out.empty() ? "" : "; ", 1 << b, line);
  }
  return out;
}

double SpeculationCosts::value(int b, int k,
                               std::span<const std::pair<double, int>> requests) const {
  // Batch b's bucket is passed as a representative batch size: 1 << b.
  double tokens = 0;
  for (const auto& [a, room] : requests) {
    const int kk = std::min(k, std::max(room, 0));
    double term = 1;
    for (int i = 0; i <= kk; ++i, term *= a) tokens += term;
  }
  return tokens / relative_cost(1 << b, k);
}

int SpeculationCosts::choose(int batch, std::span<const std::pair<double, int>> requests) {
  if (requests.empty() || max_k_ == 0) return 0;
  const int b = bucket(batch);
  int best = 0;
  double best_value = value(b, 0, requests);
  for (int k = 1; k <= max_k_; ++k) {
    const double v = value(b, k, requests);
    if (v > best_value * (1 + 1e-9)) {  // a tie keeps the shorter length
      best = k;
      best_value = v;
    }
  }
  // At best = 0 (nothing expected from drafting) the requests' own probes explore instead.
  if (best > 0 && ++steps_[static_cast<size_t>(b)] >= kExploreInterval) {
    steps_[static_cast<size_t>(b)] = 0;
    return best < max_k_ ? best + 1 : best - 1;
  }
  return best;
}

}  // namespace pagoda
