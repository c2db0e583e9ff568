#pragma once
// What the two small-m projection kernels (gemv.cu on CUDA cores for m = 1, gemv_mma.cu on tensor
// cores for m = 2-16) share around the product: the launch's decoded GemvFusion and the per-element
// math of their epilogues.
#include <cstdint>

#include "kernels/cuda/common.cuh"
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

/// Checks a small-m projection's arguments and decodes its GemvFusion (both GEMVs' requirements:
/// 1 <= m <= kGemvLimitM, k % 8 == 0, 16-byte aligned x, w and norm weight, n even when gated, a
/// consistent GemvRope). A RoPE block rotates `rope_pairs` pairs (i, i + d/2) of one head, so
/// head_dim must be a multiple of 2 * rope_pairs. cudaErrorInvalidValue otherwise.
inline cudaError_t make_gemv_params(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                                    const GemvFusion& fusion, int rope_pairs, GemvParams* out) {
  if (m > kGemvLimitM || k <= 0 || k % 8 != 0 || !aligned16(x) || !aligned16(w))
    return cudaErrorInvalidValue;
  const bool gated = fusion.epilogue == GemvEpilogue::kGatedSilu;
  if (gated && n % 2 != 0) return cudaErrorInvalidValue;
  if (fusion.norm_weight != nullptr && !aligned16(fusion.norm_weight)) return cudaErrorInvalidValue;
  int64_t rope_blocks = 0;
  if (fusion.epilogue == GemvEpilogue::kRopeCache) {
    const GemvRope& r = fusion.rope;
    const int64_t d = r.layout.head_dim, kvh = r.layout.num_kv_heads;
    if (d <= 0 || d % (2 * rope_pairs) != 0 || kvh <= 0 || r.num_heads <= 0 ||
        n != (r.num_heads + 2 * kvh) * d || r.positions == nullptr || r.inv_freq == nullptr ||
        r.slot_mapping == nullptr || r.key_cache == nullptr || r.value_cache == nullptr ||
        r.layout.block_size <= 0)
      return cudaErrorInvalidValue;
    rope_blocks = (r.num_heads + kvh) * (d / 2 / rope_pairs);
  }
  *out = GemvParams{fusion.norm_weight, fusion.norm_eps, fusion.epilogue,
                    gated ? n / 2 : n,  fusion.rope,     rope_blocks};
  return cudaSuccess;
}

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
