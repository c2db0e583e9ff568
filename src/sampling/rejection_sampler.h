#pragma once
// Speculative sampling's verification of one draft token (Leviathan et al. 2023, Chen et al.
// 2023), for drafters that sample their drafts from a distribution q.
//
// How it works. A draft x was drawn from q; the target's distribution at that position is p
// (the row's full processed distribution). Accept x with probability min(1, p(x) / q(x)); on
// rejection draw from the residual max(p - q, 0), normalised. The token that comes out follows
// p exactly: P(y) = q(y) min(1, p(y) / q(y)) + (1 - sum_z min(p(z), q(z))) r(y) = min(p, q)(y) +
// max(p - q, 0)(y) = p(y). Worked example, vocabulary (a, b, c): p = (0.5, 0.3, 0.2), q = (0.2,
// 0.6, 0.2), x = b: accepted with 0.3 / 0.6 = 0.5; the residual is (0.3, 0, 0) / 0.3: a.
// With a deterministic drafter (n-gram lookup, jump-forward) q is one-hot at x: x is accepted
// with probability p(x) and the residual is p without x, renormalised; the engine draws that
// case as "sample y from p with the request's own random stream, keep x iff y == x", which is
// the same rule (engine/engine_step.cc) and draws the same tokens as plain decoding.
#include <cstdint>
#include <span>

namespace pagoda {

/// The verdict on one draft: the token to emit at that position and whether it is the draft.
struct DraftVerdict {
  int32_t token = 0;
  bool accepted = false;
};

/// p and q: [vocab] probabilities (each summing to 1 up to rounding), q(x) > 0. u_accept and
/// u_residual: independent uniforms in [0, 1).
[[nodiscard]] DraftVerdict verify_draft(std::span<const float> p, std::span<const float> q,
                                        int32_t x, double u_accept, double u_residual);

}  // namespace pagoda
