#include "sampling/rejection_sampler.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda {

DraftVerdict verify_draft(std::span<const float> p, std::span<const float> q, int32_t x,
                          double u_accept, double u_residual) {
  PAGODA_CHECK(p.size() == q.size() && x >= 0 && static_cast<size_t>(x) < p.size(),
               "verify_draft: p [{}], q [{}], draft {}", p.size(), q.size(), x);
  const auto ux = static_cast<size_t>(x);
  PAGODA_CHECK(q[ux] > 0, "verify_draft: the draft {} has q = 0", x);
  if (u_accept * static_cast<double>(q[ux]) < static_cast<double>(p[ux])) return {x, true};
  // The residual max(p - q, 0), by inverse CDF over its unnormalised mass.
  double mass = 0;
  for (size_t i = 0; i < p.size(); ++i)
    mass += std::max(static_cast<double>(p[i]) - static_cast<double>(q[i]), 0.0);
  if (mass <= 0) return {x, true};  // p == q up to rounding: nothing to reject towards
  const double target = u_residual * mass;
  double cum = 0;
  int32_t last = x;
  for (size_t i = 0; i < p.size(); ++i) {
    const double r = std::max(static_cast<double>(p[i]) - static_cast<double>(q[i]), 0.0);
    if (r <= 0) continue;
    last = static_cast<int32_t>(i);
    cum += r;
    if (target < cum) return {last, false};
  }
  return {last, false};  // rounding: the last token with residual mass
}

}  // namespace pagoda
