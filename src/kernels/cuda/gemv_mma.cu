// linear_gemv_mma: y = x w^T for 2 <= m <= 16 on the tensor cores, with W streamed straight from
// HBM into mma fragments (no shared-memory staging), and the GEMV's fusions (GemvFusion).
//
// Why this shape: at m = 2-16 the product is still bound by reading W once, so the kernel keeps
// the GEMV's streaming (16-byte no-L1 loads into registers, many blocks, split-K inside the
// block), but the m dot products per weight go to mma.sync m16n8k16 instead of CUDA-core FMAs:
// the CUDA-core GEMV runs out of issue slots from m = 2 on (8 x m FMAs and an x load per 16 bytes
// of W; docs/benchmarks.md).
//
// The load layout. A warp owns 16 W rows (a row group) per mma and steps through k 64 at a time
// (a k step). An mma sums over 16 k, and a sum does not depend on the order of its terms, so the
// fragment's "k" can be any permutation of the physical k as long as A (W) and B (x) use the same
// one. Lane (g = lane / 4, t = lane % 4) loads 16 bytes of W rows g and g + 8 at physical k
// offsets 8t and 32 + 8t of the step (4 lanes cover 64 contiguous bytes of a row per load), and the
// 16 bytes of x column g at the same offsets; word j (0-7) of those 32 bytes is the k pair that
// mma j / 2 takes as fragment column pair (j % 2 == 0 ? 2t : 2t + 8). No shuffles, no shared
// memory, one 16-byte load per 8 weights, as in the GEMV. The W loads ask L2 for 256-byte HBM
// fetches: one instruction touches 64 bytes of each of 8 rows, and the rest of each segment is what
// the block's other warps read next (+2-6% over 32-byte fetches on the H200; the CUDA-core GEMV,
// which reads 512 contiguous bytes per instruction, loses 2-7% with the hint).
//
// The split. Warp w of a block takes k steps w, w + 8, w + 16, ... of its rows (the 8 warps split
// k), U steps per round of loads, and the block sums the warps' 16 x 8 tiles through shared memory
// in a fixed order (deterministic). A block owns R row groups: each x fragment is reused over R
// groups, so x costs m / (16 R) of W's bytes from L2, at the price of fewer blocks. R = 2, U = 2 is
// the fastest split on every Llama-8B shape at m = 2-8 (bench_kernels_cuda gemv).
//
// Fusions. The norm's sum of squares comes from the x loads the kernel makes anyway; x is scaled by
// the norm weight in fp32 and rounded once to 16 bits for the mma (the unfused path rounds the
// normalised x once too), and 1 / rms scales the finished sums. Paired epilogues use R = 2 with the
// pair in the two row groups: gate rows j..j+15 and their up rows (SiLU-and-mul), or rows e..e+15
// of a q or k head and their rotation partners e + d/2.. (RoPE; head_dim % 32 == 0), whose k and v
// rows then go to the paged cache.
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_epilogue.cuh"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/mma.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kStepK = 64;
constexpr int kFusedRowGroups = 2;  // every fused variant: pairs need two row groups
constexpr int kFusedSteps = 2;
constexpr int kRopePairs = 16;  // rotation pairs per RoPE block: one row group each half

__device__ __forceinline__ uint4 load_x16(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ float2 unpack2(uint32_t u, __nv_bfloat16) {
  return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
__device__ __forceinline__ float2 unpack2(uint32_t u, __half) {
  return __half22float2(*reinterpret_cast<const __half2*>(&u));
}

// x (8 values) times the norm weight, rounded once to T; their squares added to sumsq.
template <typename T>
__device__ __forceinline__ uint4 scale_by_gamma(const uint4& xv, const uint4& gv, float& sumsq) {
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = unpack2(word(xv, i), T{}), g = unpack2(word(gv, i), T{});
    sumsq = fmaf(a.x, a.x, fmaf(a.y, a.y, sumsq));
    out[i] = pack2<T>(a.x * g.x, a.y * g.y);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Row i (0-15) of row group r of this block, in w (clamped to a valid row: clamped rows are
// computed, never stored), by epilogue:
//   plain: rows b * 16R + 16r + i;
//   gated: gate row j = 16b + i (r = 0) and its up row out_cols + j (r = 1);
//   rope: blocks < rope_blocks hold rows e + i (r = 0) and e + d/2 + i (r = 1) of one q or k head;
//   the v blocks after them are plain over the v rows.
template <GemvEpilogue E, int R>
__device__ __forceinline__ int64_t unclamped_row(const GemvParams& p, int r, int i) {
  const int64_t b = blockIdx.x;
  if constexpr (E == GemvEpilogue::kGatedSilu) {
    return (r == 1 ? p.out_cols : 0) + b * 16 + i;
  } else if constexpr (E == GemvEpilogue::kRopeCache) {
    const int d = p.rope.layout.head_dim, half = d / 2;
    if (b < p.rope_blocks) {
      const int units = half / kRopePairs, bi = static_cast<int>(b);
      return static_cast<int64_t>(bi / units) * d + (r == 1 ? half : 0) +
             (bi % units) * kRopePairs + i;
    }
    const int64_t v0 = static_cast<int64_t>(p.rope.num_heads + p.rope.layout.num_kv_heads) * d;
    return v0 + (b - p.rope_blocks) * (16 * R) + r * 16 + i;
  }
  return b * (16 * R) + r * 16 + i;
}
template <GemvEpilogue E, int R>
__device__ __forceinline__ int64_t clamped_row(const GemvParams& p, int64_t n, int r, int i) {
  if constexpr (E == GemvEpilogue::kGatedSilu) {
    const int64_t j = min(static_cast<int64_t>(blockIdx.x) * 16 + i, p.out_cols - 1);
    return (r == 1 ? p.out_cols : 0) + j;
  }
  return min(unclamped_row<E, R>(p, r, i), n - 1);
}

// NT: n-tiles of 8 (m <= 8 * NT); R: row groups per block; U: k steps per load round of a warp.
template <typename T, int NT, int R, int U, bool kNorm, GemvEpilogue E>
__global__ void __launch_bounds__(kThreads)
    gemv_mma_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                    T* __restrict__ y, int m, int64_t k, int64_t n, GemvParams p) {
  constexpr bool kPaired = E == GemvEpilogue::kGatedSilu || E == GemvEpilogue::kRopeCache;
  static_assert(!kPaired || R == 2, "paired epilogues keep the pair in two row groups");
  constexpr int kRows = 16 * R;
  constexpr int64_t kRound = static_cast<int64_t>(kWarps) * U;  // k steps per block round
  __shared__ float partial[kWarps][kRows][NT * 8 + 1];
  __shared__ float squares[kWarps][NT * 8];
  const T* __restrict__ gamma = static_cast<const T*>(p.norm_weight);  // non-null iff kNorm
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t steps = (k + kStepK - 1) / kStepK;

  float acc[R][NT][4];
  float sumsq[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    sumsq[j] = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][j][e] = 0.0f;
  }

  // [k step][row group][row g or g + 8][offset 8t or 32 + 8t]
  uint4 wv[U][R][2][2];
  const T* wrow[R][2];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) wrow[r][h] = w + clamped_row<E, R>(p, n, r, h * 8 + g) * k + 8 * t;
  auto load_w = [&](int64_t s0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t s = s0 + u * kWarps;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int64_t kk = s * kStepK + c * 32;
        const bool in_k = s < steps && kk + 8 * t < k;
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            wv[u][r][h][c] = in_k ? load_stream16_l2_256(wrow[r][h] + kk) : make_uint4(0, 0, 0, 0);
      }
    }
  };

  // Weights never depend on the previous kernel: the first round is requested before waiting.
  load_w(warp);
  begin_dependent_kernel();
  for (int64_t s0 = warp; s0 < steps; s0 += kRound) {
    if (s0 != warp) load_w(s0);
    uint4 xv[U][NT][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t s = s0 + u * kWarps;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int64_t kk = s * kStepK + c * 32 + 8 * t;
        const bool in_k = s < steps && kk < k;
        uint4 gv = make_uint4(0, 0, 0, 0);
        if constexpr (kNorm) gv = in_k ? load_x16(gamma + kk) : gv;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int col = j * 8 + g;
          xv[u][j][c] = in_k && col < m ? load_x16(x + col * k + kk) : make_uint4(0, 0, 0, 0);
          if constexpr (kNorm) xv[u][j][c] = scale_by_gamma<T>(xv[u][j][c], gv, sumsq[j]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {  // mma q takes words 2q, 2q + 1 of the lane's 32 bytes
        const int c = q / 2, i0 = (2 * q) % 4, i1 = i0 + 1;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t a[4] = {word(wv[u][r][0][c], i0), word(wv[u][r][1][c], i0),
                                 word(wv[u][r][0][c], i1), word(wv[u][r][1][c], i1)};
#pragma unroll
          for (int j = 0; j < NT; ++j)
            mma<T>(acc[r][j], a, word(xv[u][j][c], i0), word(xv[u][j][c], i1));
        }
      }
    }
  }

  // D fragment: d0, d1 = D[g][2t], D[g][2t + 1]; d2, d3 = D[g + 8][2t], D[g + 8][2t + 1].
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      partial[warp][r * 16 + g][j * 8 + 2 * t] = acc[r][j][0];
      partial[warp][r * 16 + g][j * 8 + 2 * t + 1] = acc[r][j][1];
      partial[warp][r * 16 + g + 8][j * 8 + 2 * t] = acc[r][j][2];
      partial[warp][r * 16 + g + 8][j * 8 + 2 * t + 1] = acc[r][j][3];
    }
  if constexpr (kNorm) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {  // the 4 lanes of column g hold its squares
      float s = sumsq[j];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (t == 0) squares[warp][j * 8 + g] = s;
    }
  }
  __syncthreads();

  // The warps' partials of one output, summed in a fixed order (deterministic).
  auto total = [&](int i, int col) {
    float s = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) s += partial[wi][i][col];
    return s;
  };
  auto scale_of = [&](int col) {
    if constexpr (!kNorm) return 1.0f;
    float s = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) s += squares[wi][col];
    return rsqrtf(s / static_cast<float>(k) + p.norm_eps);
  };
  auto bias_of = [&](int64_t row) { return bias != nullptr ? to_float(bias[row]) : 0.0f; };
  if constexpr (kPaired) {
    if (E == GemvEpilogue::kGatedSilu || blockIdx.x < p.rope_blocks) {
      for (int idx = threadIdx.x; idx < 16 * m; idx += kThreads) {
        const int col = idx / 16, i = idx % 16;
        const float sc = scale_of(col);
        const int64_t row_a = unclamped_row<E, R>(p, 0, i), row_b = unclamped_row<E, R>(p, 1, i);
        if (E == GemvEpilogue::kGatedSilu) {
          if (row_a >= p.out_cols) continue;
          const float gate = total(i, col) * sc + bias_of(row_a);
          const float up = total(16 + i, col) * sc + bias_of(row_b);
          y[col * p.out_cols + row_a] = from_float<T>(silu(gate) * up);
          continue;
        }
        const GemvRope& rp = p.rope;
        const int d = rp.layout.head_dim, head = static_cast<int>(row_a / d);
        const int e = static_cast<int>(row_a % d);
        const float va = total(i, col) * sc + bias_of(row_a);
        const float vb = total(16 + i, col) * sc + bias_of(row_b);
        float sn, cs;
        rope_sincos(static_cast<float>(rp.positions[col]) * rp.inv_freq[e], &sn, &cs);
        const T ra = from_float<T>(va * cs - vb * sn), rb = from_float<T>(vb * cs + va * sn);
        y[col * n + row_a] = ra;
        y[col * n + row_b] = rb;
        const int64_t slot = rp.slot_mapping[col];
        if (head >= rp.num_heads && slot >= 0) {
          T* kc =
              static_cast<T*>(rp.key_cache) + kv_cache_offset(rp.layout, slot, head - rp.num_heads);
          kc[e] = ra;
          kc[e + d / 2] = rb;
        }
      }
      return;
    }
  }
  if constexpr (E != GemvEpilogue::kGatedSilu) {  // gated blocks are all done above
    for (int idx = threadIdx.x; idx < kRows * m; idx += kThreads) {
      const int col = idx / kRows, i = idx % kRows;
      const int64_t row = unclamped_row<E, R>(p, i / 16, i % 16);
      if (row >= n) continue;
      float value = total(i, col) * scale_of(col) + bias_of(row);
      if (E == GemvEpilogue::kAccumulate) value += to_float(y[col * n + row]);
      const T out = from_float<T>(value);
      y[col * n + row] = out;
      if constexpr (E == GemvEpilogue::kRopeCache) {  // a v row
        const GemvRope& rp = p.rope;
        const int64_t slot = rp.slot_mapping[col];
        const int d = rp.layout.head_dim;
        const int64_t j = row - static_cast<int64_t>(rp.num_heads + rp.layout.num_kv_heads) * d;
        if (slot >= 0)
          static_cast<T*>(
              rp.value_cache)[kv_cache_offset(rp.layout, slot, static_cast<int>(j / d)) + j % d] =
              out;
      }
    }
  }
}

template <typename T, int NT, int R, int U, bool kNorm, GemvEpilogue E>
cudaError_t launch_mma(const T* x, int m, int64_t k, const T* w, int64_t n, const T* bias, T* y,
                       const GemvParams& p, cudaStream_t stream) {
  int64_t blocks = 0;
  if (E == GemvEpilogue::kGatedSilu) {
    blocks = (p.out_cols + 15) / 16;
  } else if (E == GemvEpilogue::kRopeCache) {
    const int64_t v_rows =
        static_cast<int64_t>(p.rope.layout.num_kv_heads) * p.rope.layout.head_dim;
    blocks = p.rope_blocks + (v_rows + 16 * R - 1) / (16 * R);
  } else {
    blocks = (n + 16 * R - 1) / (16 * R);
  }
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  return launch_kernel(gemv_mma_kernel<T, NT, R, U, kNorm, E>, dim3(static_cast<unsigned>(blocks)),
                       kThreads, 0, stream, x, w, bias, y, m, k, n, p);
}

// The one dispatch point: plain products take any supported split, fused ones run R = 2, U = 2.
template <typename T, int NT>
cudaError_t launch_mma_for(const T* x, int m, int64_t k, const T* w, int64_t n, const T* bias, T* y,
                           const GemvParams& p, const GemvMmaTuning& tuning, cudaStream_t stream) {
  using Epi = GemvEpilogue;
  const bool norm = p.norm_weight != nullptr;
  if (!norm && p.epilogue == Epi::kStore) {
    const int r = tuning.row_groups, u = tuning.steps_in_flight;
#define PAGODA_MMA_SPLIT(R, U) \
  if (r == R && u == U)        \
    return launch_mma<T, NT, R, U, false, Epi::kStore>(x, m, k, w, n, bias, y, p, stream);
    PAGODA_MMA_SPLIT(1, 4)
    PAGODA_MMA_SPLIT(2, 1)
    PAGODA_MMA_SPLIT(2, 2)
    PAGODA_MMA_SPLIT(4, 1)
#undef PAGODA_MMA_SPLIT
    return cudaErrorInvalidValue;
  }
  constexpr int R = kFusedRowGroups, U = kFusedSteps;
  auto go = [&](auto norm_c, auto epi_c) {
    return launch_mma<T, NT, R, U, decltype(norm_c)::value, decltype(epi_c)::value>(
        x, m, k, w, n, bias, y, p, stream);
  };
  using Yes = std::true_type;
  using No = std::false_type;
  using Store = std::integral_constant<Epi, Epi::kStore>;
  using Acc = std::integral_constant<Epi, Epi::kAccumulate>;
  using Gated = std::integral_constant<Epi, Epi::kGatedSilu>;
  using Rope = std::integral_constant<Epi, Epi::kRopeCache>;
  switch (p.epilogue) {
    case Epi::kStore:
      return go(Yes{}, Store{});
    case Epi::kAccumulate:
      return norm ? go(Yes{}, Acc{}) : go(No{}, Acc{});
    case Epi::kGatedSilu:
      return norm ? go(Yes{}, Gated{}) : go(No{}, Gated{});
    case Epi::kRopeCache:
      return norm ? go(Yes{}, Rope{}) : go(No{}, Rope{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t linear_gemv_mma_fused(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                                  const void* bias, void* y, const GemvFusion& fusion, DType dtype,
                                  cudaStream_t stream, const GemvMmaTuning& tuning) {
  if (n <= 0 || m <= 0) return m == 0 || n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  GemvParams p;
  if (fusion.epilogue == GemvEpilogue::kRopeCache && fusion.rope.cache_dtype != dtype)
    return cudaErrorNotSupported;
  if (const cudaError_t e = make_gemv_params(x, m, k, w, n, fusion, kRopePairs, &p);
      e != cudaSuccess)
    return e;
  PAGODA_DISPATCH_HALF(dtype, {
    using T = scalar_t;
    const T* xt = static_cast<const T*>(x);
    const T* wt = static_cast<const T*>(w);
    const T* bt = static_cast<const T*>(bias);
    T* yt = static_cast<T*>(y);
    const int mi = static_cast<int>(m);
    const cudaError_t e = m <= 8
                              ? launch_mma_for<T, 1>(xt, mi, k, wt, n, bt, yt, p, tuning, stream)
                              : launch_mma_for<T, 2>(xt, mi, k, wt, n, bt, yt, p, tuning, stream);
    if (e != cudaSuccess) return e;
    return cudaGetLastError();
  });
}

cudaError_t linear_gemv_mma(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                            const void* bias, void* y, DType dtype, cudaStream_t stream,
                            const GemvMmaTuning& tuning) {
  return linear_gemv_mma_fused(x, m, k, w, n, bias, y, GemvFusion{}, dtype, stream, tuning);
}

}  // namespace pagoda::cuda
