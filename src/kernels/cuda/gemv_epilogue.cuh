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

// The CUDA-core GEMVs (gemv.cu, gemv_fp8.cu): output columns (W rows) per block.
inline constexpr int kGemvCols = 4;

// W row c (< kGemvCols) of the rows (= y columns, except when gated) that block b owns:
//   plain: b*4 .. b*4 + 3 (clamped to n - 1: the clamped ones are computed, never stored);
//   gated: gate rows j0, j0 + 1 and up rows out_cols + j0, out_cols + j0 + 1, with j0 = 2b;
//   rope: in the q/k columns, rows e, e + 1, e + half, e + half + 1 of one head (the rotation's two
//   pairs); past them, v columns 4 at a time.
// Example (rope, head_dim 128: 32 blocks per head): block 37 is head 1, e = 10: rows 138, 139,
// 202, 203.
template <GemvEpilogue E>
__device__ __forceinline__ int64_t gemv_block_row(const GemvParams& p, int64_t n, int c) {
  const int64_t b = blockIdx.x;
  if constexpr (E == GemvEpilogue::kGatedSilu) {
    return (c >= kGemvCols / 2 ? p.out_cols : 0) + min(2 * b + c % 2, p.out_cols - 1);
  } else if constexpr (E == GemvEpilogue::kRopeCache) {
    if (b < p.rope_blocks) {  // 32-bit division: a 64-bit one costs ~10 registers
      const int d = p.rope.layout.head_dim, half = d / 2, units = half / 2;
      const int bi = static_cast<int>(b), head = bi / units, e = (bi % units) * 2;
      return static_cast<int64_t>(head) * d + (c >= 2 ? half : 0) + e + c % 2;
    }
  }
  return min(b * kGemvCols + c, n - 1);  // rope's v blocks: b * 4 is past the q and k columns too
}

// The CUDA-core GEMVs' epilogue for output (row i of x, column c of the block): `value` is the
// finished sum of W row gemv_block_row(c) (scales, norm and bias applied), `other` that of row c +
// 2 for a paired epilogue (gated: the up row; rope: the pair's other half).
template <typename T, GemvEpilogue E>
__device__ __forceinline__ void gemv_store(const GemvParams& p, T* __restrict__ y, int64_t n, int i,
                                           int c, bool paired, float value, float other) {
  if (paired || E == GemvEpilogue::kRopeCache) {
    if (E == GemvEpilogue::kGatedSilu) {
      const int64_t col = 2 * static_cast<int64_t>(blockIdx.x) + c;
      if (c < 2 && col < p.out_cols) y[i * p.out_cols + col] = from_float<T>(silu(value) * other);
      return;
    }
    const GemvRope& r = p.rope;
    const int64_t slot = r.slot_mapping[i];
    const int d = r.layout.head_dim;
    if (paired) {
      const int row = static_cast<int>(gemv_block_row<E>(p, n, c));  // row + d / 2 is its pair's
      const int head = row / d, e = row % d;
      float sn, cs;
      rope_sincos(static_cast<float>(r.positions[i]) * r.inv_freq[e], &sn, &cs);
      const T ra = from_float<T>(value * cs - other * sn),
              rb = from_float<T>(other * cs + value * sn);
      y[i * n + row] = ra;
      y[i * n + row + d / 2] = rb;
      if (head >= r.num_heads && slot >= 0) {
        T* kc = static_cast<T*>(r.key_cache) + kv_cache_offset(r.layout, slot, head - r.num_heads);
        kc[e] = ra;
        kc[e + d / 2] = rb;
      }
      return;
    }
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kGemvCols + c;  // a v column
    if (col >= n) return;
    const T v = from_float<T>(value);
    y[i * n + col] = v;
    if (slot >= 0) {
      const int j = static_cast<int>(col) - (r.num_heads + r.layout.num_kv_heads) * d;
      static_cast<T*>(r.value_cache)[kv_cache_offset(r.layout, slot, j / d) + j % d] = v;
    }
    return;
  }
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kGemvCols + c;
  if (col < n) y[i * n + col] = from_float<T>(value);
}

/// Eight bf16 / fp16 values (one 16-byte load of x or W) as floats; the last argument picks the
/// type.
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8], __nv_bfloat16) {
  const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(u[i] << 16);
    out[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8], __half) {
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

/// What a GEMV thread brings to its block's end (gemv_finish): the output it writes, if any
/// (row out_i, block column out_c), and what is added to and multiplied into it.
template <typename T>
struct GemvOutput {
  T* y;          // [m, n]
  int64_t n, k;  // output and input features
  bool writer;   // this thread stores an output
  bool paired;   // gated / rope epilogues: block columns c and c + 2 together
  int out_i, out_c;
  float prior = 0.0f, prior_pair = 0.0f;  // bias and residual of the column(s)
  float scale = 1.0f, scale_pair = 1.0f;  // the weight rows' scales (FP8); 1 otherwise
};

/// The thread's output in its GEMV block and the output's prior (the bias, and y itself for
/// kAccumulate), read early so that their latency hides under the weight stream. Paired
/// epilogues (gated, rope): thread c < 2 finishes W rows c and c + 2 (gate and up, or the two
/// halves of a rotation) and loads the inputs of both.
template <typename T, GemvEpilogue E, int M, int kCols>
__device__ __forceinline__ GemvOutput<T> gemv_output(T* __restrict__ y, const T* __restrict__ bias,
                                                     int m, int64_t n, int64_t k,
                                                     const GemvParams& p) {
  GemvOutput<T> o{y,
                  n,
                  k,
                  false,
                  false,
                  static_cast<int>(threadIdx.x) / kCols,
                  static_cast<int>(threadIdx.x) % kCols};
  o.writer = threadIdx.x < M * kCols && o.out_i < m;
  o.paired = E == GemvEpilogue::kGatedSilu ||
             (E == GemvEpilogue::kRopeCache && blockIdx.x < p.rope_blocks);
  if (o.writer) {
    const int64_t row = gemv_block_row<E>(p, n, o.out_c);
    if (bias != nullptr) {
      o.prior = to_float(bias[row]);
      if (o.paired && o.out_c < 2)
        o.prior_pair = to_float(bias[gemv_block_row<E>(p, n, o.out_c + 2)]);
    }
    if (E == GemvEpilogue::kAccumulate) o.prior += to_float(y[o.out_i * n + row]);
  }
  return o;
}

/// The end of every GEMV block (gemv.cu, gemv_fp8.cu, gemv_w4.cu): each warp's sums of its
/// threads' acc [M][kCols] (and of sumsq [M] with kNorm) go to partial [kWarps][M * (kCols + 1)]
/// (slot i * kCols + c; the sums of squares at M * kCols + i); each writer then adds the warps'
/// partials of its slot in a fixed order (deterministic), divides by the RMS (kNorm: sum_k (x_k /
/// rms) g_k w_k = (sum_k x_k g_k w_k) / rms), applies its scale and prior, and stores.
/// Example, M = 1, kCols = 4, 4 warps: thread 2 writes column 2 from partial[0..3][2].
template <typename T, GemvEpilogue E, int M, int kCols, int kWarps, bool kNorm>
__device__ __forceinline__ void gemv_finish(const float (&acc)[M][kCols], const float (&sumsq)[M],
                                            float (&partial)[kWarps][M * (kCols + 1)],
                                            const GemvOutput<T>& o, const GemvParams& p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < M; ++i) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const float s = warp_sum(acc[i][c]);
      if (lane == 0) partial[warp][i * kCols + c] = s;
    }
    if (kNorm) {
      const float s = warp_sum(sumsq[i]);
      if (lane == 0) partial[warp][M * kCols + i] = s;
    }
  }
  __syncthreads();
  if (!o.writer || (o.paired && o.out_c >= 2)) return;
  auto total = [&](int slot) {
    float s = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) s += partial[wi][slot];
    return s;
  };
  const int i = o.out_i, c = o.out_c;
  const float inv_rms =
      kNorm ? rsqrtf(total(M * kCols + i) / static_cast<float>(o.k) + p.norm_eps) : 1.0f;
  const float value = total(i * kCols + c) * inv_rms * o.scale + o.prior;
  const float other =
      o.paired ? total(i * kCols + c + 2) * inv_rms * o.scale_pair + o.prior_pair : 0.0f;
  gemv_store<T, E>(p, o.y, o.n, i, c, o.paired, value, other);
}

}  // namespace pagoda::cuda
