// linear_gemv: y = x w^T for m <= 16, the decode-time projection, bound by reading W once.
//
// Why this shape: at small m every weight byte is used m times, so the kernel must stream W at
// full HBM bandwidth. A block owns kCols = 4 output columns and splits k across its 8 warps (split-
// K inside the block, reduced through shared memory), so even n = 4096 gives 1024 blocks and the
// grid fills every SM. Each thread issues kUnroll x kCols independent 16-byte no-L1 loads of W
// before using them; x (at most 16 x k, L1/L2 resident) is read with 16-byte __ldg. The m rows
// share every W register, so W traffic is independent of m; the template M (1, 2, 4, 8, 16) fixes
// the accumulator array, rows >= m are skipped. The first round's weight loads are issued before
// the wait for the previous kernel (below): W must therefore not be written by the kernel just
// before the GEMV in the stream (model weights are constant while the model runs).
//
// Fusions (GemvFusion): an RMSNorm of x costs only the sum of x^2 over loads the kernel makes
// anyway (the 1/rms factor is applied to the finished dot products), a residual add is a read of y
// by the thread that writes it, SiLU-and-mul needs the gate and up rows of an output column in the
// same block (a gated block owns 2 output columns: 4 W rows, 2 gate and 2 up), and RoPE needs both
// halves of a rotation pair (a rope block owns the pairs (e, e + d/2) and (e + 1, e + 1 + d/2) of
// one q or k head; v columns follow, 4 per block) and then writes k and v into the paged cache.
// Each replaces a kernel of the batch-1 decode layer (2% of a step in all; docs/engine.md).
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_epilogue.cuh"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/linear.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kCols = kGemvCols;
constexpr int kUnroll = 2;

// kU: loads per W row in flight per thread (kUnroll, or 1 where registers are short).
template <typename T, int M, bool kNorm, GemvEpilogue E, int kU = kUnroll>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ y, int m, int64_t k, int64_t n, GemvParams p) {
  // Per warp: M x kCols dot products, then M sums of squares of x when normalising.
  __shared__ float partial[kThreads / 32][M * (kCols + 1)];
  const T* __restrict__ gamma = static_cast<const T*>(p.norm_weight);  // non-null iff kNorm
  // The rows are recomputed where needed instead of kept live across the main loop: at m = 1
  // four blocks per SM need <= 64 registers (a limit forced by __launch_bounds__ instead costs 15%:
  // the compiler then serialises the weight loads).
  const int64_t chunks = k / 8;
  const T* wrow[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) wrow[c] = w + gemv_block_row<E>(p, n, c) * k;

  float acc[M][kCols];
  float sumsq[M];
#pragma unroll
  for (int i = 0; i < M; ++i) {
    sumsq[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[i][c] = 0.0f;
  }

  uint4 wv[kU][kCols];
  auto load_w = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t ch = base + u * kThreads;
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        wv[u][c] = ch < chunks ? load_stream16(wrow[c] + ch * 8) : make_uint4(0, 0, 0, 0);
    }
  };
  // The first round of weights is requested before waiting for the previous kernel: weights never
  // depend on it, so their HBM latency overlaps its tail (programmatic dependent launch makes the
  // blocks resident early). x, which the previous kernel writes, is read after the wait.
  load_w(threadIdx.x);
  begin_dependent_kernel();
  // The epilogue's own reads (the residual, the bias) are issued now, so that their latency hides
  // under the weight stream instead of adding to the block's tail.
  const GemvOutput<T> out = gemv_output<T, E, M, kCols>(y, bias, m, n, k, p);
  for (int64_t base = threadIdx.x; base < chunks; base += kThreads * kU) {
    if (base != threadIdx.x) load_w(base);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t ch = base + u * kThreads;
      if (ch >= chunks) break;
      float wf[kCols][8];
#pragma unroll
      for (int c = 0; c < kCols; ++c) unpack8(wv[u][c], wf[c], T{});
      float gf[8];
      if (kNorm) unpack8(__ldg(reinterpret_cast<const uint4*>(gamma + ch * 8)), gf, T{});
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i >= m) break;
        float xf[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(x + i * k + ch * 8)), xf, T{});
        // RMSNorm folded in: sum_k (x_k / rms) g_k w_k = (sum_k x_k g_k w_k) / rms, and rms needs
        // only the sum of x_k^2, accumulated from the same loads.
        if (kNorm) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            sumsq[i] = fmaf(xf[j], xf[j], sumsq[i]);
            xf[j] *= gf[j];
          }
        }
#pragma unroll
        for (int c = 0; c < kCols; ++c)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[i][c] = fmaf(xf[j], wf[c][j], acc[i][c]);
      }
    }
  }

  gemv_finish<T, E, M, kCols, kThreads / 32, kNorm>(acc, sumsq, partial, out, p);
}

template <typename T>
cudaError_t launch_gemv(const T* x, int m, int64_t k, const T* w, int64_t n, const T* bias, T* y,
                        const GemvParams& p, cudaStream_t stream) {
  const int64_t cols_per_block = p.epilogue == GemvEpilogue::kGatedSilu ? kCols / 2 : kCols;
  const int64_t blocks = (p.out_cols + cols_per_block - 1) / cols_per_block;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks));
  // The one dispatch point of the GEMV family. Plain products: five accumulator shapes per dtype.
  // Fused ones (a norm or an epilogue, each a compile-time variant so that the plain kernel keeps
  // its registers for W): m = 1 (decode) and m <= 16.
  auto fused = [&](auto e) {
    constexpr GemvEpilogue E = decltype(e)::value;
    auto go = [&](auto kernel) {
      return launch_kernel(kernel, grid, kThreads, 0, stream, x, w, bias, y, m, k, n, p);
    };
    // The normalising RoPE variant takes 74 registers with two loads per row in flight (three
    // blocks per SM) and 57 with one (four blocks): +0.3% per decode step on the H200.
    if constexpr (E == GemvEpilogue::kRopeCache) {
      if (p.norm_weight != nullptr && m == 1) return go(gemv_kernel<T, 1, true, E, 1>);
    }
    if (p.norm_weight != nullptr)
      return m == 1 ? go(gemv_kernel<T, 1, true, E>) : go(gemv_kernel<T, 16, true, E>);
    return m == 1 ? go(gemv_kernel<T, 1, false, E>) : go(gemv_kernel<T, 16, false, E>);
  };
  using Epi = GemvEpilogue;
  if (p.epilogue == Epi::kAccumulate)
    fused(std::integral_constant<Epi, Epi::kAccumulate>{});
  else if (p.epilogue == Epi::kGatedSilu)
    fused(std::integral_constant<Epi, Epi::kGatedSilu>{});
  else if (p.epilogue == Epi::kRopeCache)
    fused(std::integral_constant<Epi, Epi::kRopeCache>{});
  else if (p.norm_weight != nullptr)
    fused(std::integral_constant<Epi, Epi::kStore>{});
  else {
    auto go = [&](auto kernel) {
      return launch_kernel(kernel, grid, kThreads, 0, stream, x, w, bias, y, m, k, n, p);
    };
    constexpr Epi S = Epi::kStore;
    if (m == 1)
      go(gemv_kernel<T, 1, false, S>);
    else if (m == 2)
      go(gemv_kernel<T, 2, false, S>);
    else if (m <= 4)
      go(gemv_kernel<T, 4, false, S>);
    else if (m <= 8)
      go(gemv_kernel<T, 8, false, S>);
    else
      go(gemv_kernel<T, 16, false, S>);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t linear_gemv_fused(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                              const void* bias, void* y, const GemvFusion& fusion, DType dtype,
                              cudaStream_t stream) {
  if (n <= 0 || m <= 0) return m == 0 || n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  GemvParams p;
  if (fusion.epilogue == GemvEpilogue::kRopeCache && fusion.rope.cache_dtype != dtype)
    return cudaErrorNotSupported;
  if (const cudaError_t e = make_gemv_params(x, m, k, w, n, fusion, kCols / 2, &p);
      e != cudaSuccess)
    return e;
  PAGODA_DISPATCH_HALF(dtype, {
    return launch_gemv(static_cast<const scalar_t*>(x), static_cast<int>(m), k,
                       static_cast<const scalar_t*>(w), n, static_cast<const scalar_t*>(bias),
                       static_cast<scalar_t*>(y), p, stream);
  });
}

cudaError_t linear_gemv(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                        const void* bias, void* y, DType dtype, cudaStream_t stream) {
  return linear_gemv_fused(x, m, k, w, n, bias, y, GemvFusion{}, dtype, stream);
}

}  // namespace pagoda::cuda
