#pragma once
// Two-sample chi-square test of token counts, shared by the speculative-decoding tests (n-gram
// and draft-model drafts against plain sampling).
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

namespace pagoda {

/// Pearson's two-sample chi-square statistic over the categories of two equal-sized samples
/// (categories with fewer than 10 observations in both together are pooled), and its degrees
/// of freedom.
inline std::pair<double, int> chi_square(const std::map<int32_t, int>& a,
                                         const std::map<int32_t, int>& b) {
  std::map<int32_t, std::pair<int, int>> both;
  for (const auto& [t, n] : a) both[t].first += n;
  for (const auto& [t, n] : b) both[t].second += n;
  double stat = 0;
  int categories = 0;
  std::pair<int, int> pooled{0, 0};
  auto add = [&](std::pair<int, int> c) {
    const double d = c.first - c.second;
    stat += d * d / (c.first + c.second);
    ++categories;
  };
  for (const auto& [t, c] : both) {
    if (c.first + c.second < 10) {
      pooled.first += c.first;
      pooled.second += c.second;
    } else {
      add(c);
    }
  }
  if (pooled.first + pooled.second > 0) add(pooled);
  return {stat, categories - 1};
}

/// The chi-square quantile for `df` degrees of freedom at upper tail 0.001 (Wilson-Hilferty).
inline double chi_square_critical_001(int df) {
  const double z = 3.0902;  // the standard normal's 0.999 quantile
  const double v = 2.0 / (9.0 * df);
  return df * std::pow(1 - v + z * std::sqrt(v), 3);
}

}  // namespace pagoda
