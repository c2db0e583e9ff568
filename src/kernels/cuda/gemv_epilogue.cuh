#pragma once
// What the two small-m projection kernels (gemv.cu on CUDA cores for m = 1, gemv_mma.cu on tensor
// cores for m = 2-16) share around the product: the launch's decoded GemvFusion and the per-element
// math of their epilogues.
#include <cstdint>

#include "kernels/cuda/linear.h"

namespace pagoda::cuda {

// What a launch fuses (GemvFusion, decoded once on the host); every flag is uniform over the grid.
struct GemvParams {
  const void* norm_weight;  // non-null: x rows are RMS-normalised on load
  float norm_eps;
  GemvEpilogue epilogue;
  int64_t out_cols;  // columns of y: n, or n / 2 when gated
  // kRopeCache: y is [m, (heads + 2 kv heads) * head_dim] of q, k, v (see GemvRope).
  GemvRope rope;
  int64_t rope_blocks;  // blocks of rotation pairs in the q and k columns; then v blocks
};

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// sin and cos of the fp32 angle a, as sincosf(a) to ~1e-6 for |a| up to 1e6 (positions of 1e5 and
// more): the reduction to [-pi, pi] in double is exact enough (the error of k * 2pi stays below
// 1e-9) and the intrinsics are accurate there. sincosf keeps a Payne-Hanek path for huge arguments
// whose registers the whole kernel would pay for (the GEMV: 74 instead of 64, three blocks per SM
// instead of four).
__device__ __forceinline__ void rope_sincos(float a, float* s, float* c) {
  constexpr double kTwoPi = 6.283185307179586;
  const double x = static_cast<double>(a);
  __sincosf(static_cast<float>(x - rint(x * (1.0 / kTwoPi)) * kTwoPi), s, c);
}

}  // namespace pagoda::cuda
