// linear_w4_gemv: y = x W^T + bias for m <= 8 with W in the W4 layout (linear_w4.h), the
// decode-time GPTQ / AWQ projection, bound by reading W's half byte per weight once.
//
// How it works: gemv_fp8.cu's CUDA-core GEMV with 4-bit codes. A block owns kCols = 4 output
// columns (W rows) and splits k across its 4 or 8 warps; a "chunk" is 32 consecutive elements of a
// row: one 16-byte load of W (4 words of 8 codes) and, since the group size is a multiple of 32,
// one group: one meta word (scale, zero) per row. Each thread keeps kU chunks x 4 rows in flight
// (no-L1 streaming loads), decodes each word's 8 codes in registers exactly as fp32 (q - zero)
// (below), accumulates x * (q - zero) over the chunk in fp32 and adds scale * that sum to the
// row's total (one multiply per chunk and row instead of per weight). The fusions are gemv.cu's:
// the RMSNorm of x from the same loads, the residual add by the writing thread, SiLU-and-mul by
// blocks owning gate and up rows, RoPE and the paged-cache write by blocks owning rotation pairs.
// With an act-order permutation, linear_w4_gemv first gathers x into the scratch (gather_columns,
// the norm applied there) and runs the plain kernel on it.
//
// Decoding a word: lo = word & 0x0f0f0f0f holds codes 0, 2, 4, 6 in its bytes, hi = (word >> 4) &
// 0x0f0f0f0f codes 1, 3, 5, 7; __byte_perm(lo, 0x4b000000, 0x7440 | b) builds 0x4b0000qq, the
// float 2^23 + q, and subtracting 2^23 + zero (both exact) leaves q - zero exactly.
// Worked example of the addressing (plain, n = 4096, k = 4096, group 128): block 5 owns W rows
// 20..23; chunk ch of row 21 is words [21 * 512 + 4 ch, + 4) of qweight (elements [32 ch, 32 ch +
// 32)), in group 32 ch / 128, meta word 21 * 32 + ch / 4; thread t reads chunks t, t + 256, ...
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_epilogue.cuh"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/linear_w4.h"

namespace pagoda::cuda {
namespace {

constexpr int kCols = kGemvCols;
constexpr float kMagic = 8388608.0f;  // 2^23: 0x4b000000

// The 8 codes of a word minus the zero point (cz = 2^23 + zero), exactly, element order.
__device__ __forceinline__ void decode8(uint32_t word, float cz, float (&out)[8]) {
  const uint32_t lo = word & 0x0f0f0f0fu, hi = (word >> 4) & 0x0f0f0f0fu;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    out[2 * b] = __uint_as_float(__byte_perm(lo, 0x4b000000u, 0x7440u | b)) - cz;
    out[2 * b + 1] = __uint_as_float(__byte_perm(hi, 0x4b000000u, 0x7440u | b)) - cz;
  }
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// kThreads: 256, or 128 when a row has at most 256 chunks (k <= 8192: Llama-8B's 4096), where 256
// threads would leave warps without a chunk; smaller blocks also let more blocks (more loads in
// flight) share an SM. kU: chunks per row in flight per thread (16 bytes each; 2 x 4 rows = 128
// bytes, as gemv_fp8's 4 x 8 bytes x 4 rows); at M >= 4 the accumulators take the registers, so 1.
template <typename T, int kThreads, int M, bool kNorm, GemvEpilogue E, int kU = (M >= 4 ? 1 : 2)>
__global__ void __launch_bounds__(kThreads)
    gemv_w4_kernel(const T* __restrict__ x, const uint32_t* __restrict__ qweight,
                   const uint32_t* __restrict__ meta, const T* __restrict__ bias, T* __restrict__ y,
                   int m, int64_t k, int64_t n, int group_size, GemvParams p) {
  // Per warp: M x kCols dot products, then M sums of squares of x when normalising.
  __shared__ float partial[kThreads / 32][M * (kCols + 1)];
  const T* __restrict__ gamma = static_cast<const T*>(p.norm_weight);  // non-null iff kNorm
  const int chunks = static_cast<int>(k / kW4Chunk);
  const int groups = static_cast<int>(k / group_size);
  const int chunks_per_group = group_size / static_cast<int>(kW4Chunk);
  const uint4* wrow[kCols];
  const uint32_t* mrow[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int64_t row = gemv_block_row<E>(p, n, c);
    wrow[c] = reinterpret_cast<const uint4*>(qweight + row * (k / 8));
    mrow[c] = meta + row * groups;
  }

  float acc[M][kCols];
  float sumsq[M];
#pragma unroll
  for (int i = 0; i < M; ++i) {
    sumsq[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[i][c] = 0.0f;
  }

  uint4 wv[kU][kCols];
  uint32_t mv[kU][kCols];
  auto load_w = [&](int base) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int ch = base + u * kThreads;
      const int g = ch / chunks_per_group;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        wv[u][c] = ch < chunks ? load_stream16(wrow[c] + ch) : make_uint4(0, 0, 0, 0);
        mv[u][c] = ch < chunks ? __ldg(mrow[c] + g) : 0u;
      }
    }
  };
  // Weights never depend on the previous kernel: their first loads overlap its tail.
  load_w(threadIdx.x);
  begin_dependent_kernel();
  const GemvOutput<T> out = gemv_output<T, E, M, kCols>(y, bias, m, n, k, p);
  for (int base = threadIdx.x; base < chunks; base += kThreads * kU) {
    if (base != static_cast<int>(threadIdx.x)) load_w(base);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int ch = base + u * kThreads;
      if (ch >= chunks) break;
      float d[M][kCols];  // this chunk's sum of x * (q - zero) per (x row, W row)
#pragma unroll
      for (int i = 0; i < M; ++i)
#pragma unroll
        for (int c = 0; c < kCols; ++c) d[i][c] = 0.0f;
#pragma unroll
      for (int wi = 0; wi < 4; ++wi) {  // word wi: elements 32 ch + 8 wi .. + 7
        const int64_t e0 = static_cast<int64_t>(ch) * kW4Chunk + 8 * wi;
        float wf[kCols][8];
#pragma unroll
        for (int c = 0; c < kCols; ++c)
          decode8(word_of(wv[u][c], wi), kMagic + static_cast<float>(mv[u][c] >> 16), wf[c]);
        float gf[8];
        if (kNorm) unpack8(__ldg(reinterpret_cast<const uint4*>(gamma + e0)), gf, T{});
#pragma unroll
        for (int i = 0; i < M; ++i) {
          if (i >= m) break;
          float xf[8];
          unpack8(__ldg(reinterpret_cast<const uint4*>(x + i * k + e0)), xf, T{});
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
            for (int j = 0; j < 8; ++j) d[i][c] = fmaf(xf[j], wf[c][j], d[i][c]);
        }
      }
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const float s = __half2float(__ushort_as_half(static_cast<uint16_t>(mv[u][c] & 0xffffu)));
#pragma unroll
        for (int i = 0; i < M; ++i) acc[i][c] = fmaf(s, d[i][c], acc[i][c]);
      }
    }
  }

  gemv_finish<T, E, M, kCols, kThreads / 32, kNorm>(acc, sumsq, partial, out, p);
}

template <typename T, int kThreads>
cudaError_t launch_gemv_w4(const T* x, int m, const W4WeightView& wv, T* y, const GemvParams& p,
                           cudaStream_t stream) {
  const int64_t cols_per_block = p.epilogue == GemvEpilogue::kGatedSilu ? kCols / 2 : kCols;
  const int64_t blocks = (p.out_cols + cols_per_block - 1) / cols_per_block;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks));
  const T* bias = static_cast<const T*>(wv.bias);
  const int group = static_cast<int>(wv.group_size);
  auto go = [&](auto kernel) {
    return launch_kernel(kernel, grid, kThreads, 0, stream, x, wv.qweight, wv.meta, bias, y, m,
                         wv.k, wv.n, group, p);
  };
  // Variants as gemv_fp8.cu: a norm or an epilogue is a compile-time choice; fused products at
  // m = 1 (decode) and m <= 8, plain ones at m = 1, 2, 4, 8.
  auto fused = [&](auto e) {
    constexpr GemvEpilogue E = decltype(e)::value;
    if (p.norm_weight != nullptr)
      return m == 1 ? go(gemv_w4_kernel<T, kThreads, 1, true, E>)
                    : go(gemv_w4_kernel<T, kThreads, 8, true, E>);
    return m == 1 ? go(gemv_w4_kernel<T, kThreads, 1, false, E>)
                  : go(gemv_w4_kernel<T, kThreads, 8, false, E>);
  };
  using Epi = GemvEpilogue;
  cudaError_t e = cudaSuccess;
  if (p.epilogue == Epi::kAccumulate)
    e = fused(std::integral_constant<Epi, Epi::kAccumulate>{});
  else if (p.epilogue == Epi::kGatedSilu)
    e = fused(std::integral_constant<Epi, Epi::kGatedSilu>{});
  else if (p.epilogue == Epi::kRopeCache)
    e = fused(std::integral_constant<Epi, Epi::kRopeCache>{});
  else if (p.norm_weight != nullptr)
    e = fused(std::integral_constant<Epi, Epi::kStore>{});
  else if (m == 1)
    e = go(gemv_w4_kernel<T, kThreads, 1, false, Epi::kStore>);
  else if (m == 2)
    e = go(gemv_w4_kernel<T, kThreads, 2, false, Epi::kStore>);
  else if (m <= 4)
    e = go(gemv_w4_kernel<T, kThreads, 4, false, Epi::kStore>);
  else
    e = go(gemv_w4_kernel<T, kThreads, 8, false, Epi::kStore>);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace

bool w4_view_valid(const W4WeightView& w) {
  return w.k > 0 && w.k % kW4Chunk == 0 && w.group_size > 0 && w.group_size % kW4Chunk == 0 &&
         w.k % w.group_size == 0 && w.k / kW4Chunk <= 0x7fffffff && w.qweight != nullptr &&
         aligned16(w.qweight) && w.meta != nullptr;
}

cudaError_t linear_w4_gemv(const void* x, int64_t m, const W4WeightView& w, void* y,
                           const GemvFusion& fusion, void* x_scratch, DType dtype,
                           cudaStream_t stream) {
  if (w.n <= 0 || m <= 0) return m == 0 || w.n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  if (m > kW4GemvMaxM || !w4_view_valid(w)) return cudaErrorInvalidValue;
  if (fusion.epilogue == GemvEpilogue::kRopeCache && fusion.rope.cache_dtype != dtype)
    return cudaErrorNotSupported;
  GemvFusion f = fusion;
  if (w.perm != nullptr) {
    // Act-order: x's columns in the weight's order (normalised there when fused with the norm).
    if (x_scratch == nullptr || !aligned16(x_scratch)) return cudaErrorInvalidValue;
    if (fusion.norm_weight != nullptr && !aligned16(fusion.norm_weight))
      return cudaErrorInvalidValue;
    if (const cudaError_t e = gather_columns(x, m, w.k, w.perm, fusion.norm_weight, fusion.norm_eps,
                                             x_scratch, dtype, stream);
        e != cudaSuccess)
      return e;
    x = x_scratch;
    f.norm_weight = nullptr;
  }
  GemvParams p;
  // make_gemv_params checks w's 16-byte alignment for the bf16 GEMV; qweight was checked above.
  if (const cudaError_t e = make_gemv_params(x, m, w.k, x, w.n, f, kCols / 2, &p); e != cudaSuccess)
    return e;
  const bool narrow = w.k / kW4Chunk <= 256;
  PAGODA_DISPATCH_HALF(dtype, {
    const auto* xs = static_cast<const scalar_t*>(x);
    auto* ys = static_cast<scalar_t*>(y);
    return narrow ? launch_gemv_w4<scalar_t, 128>(xs, static_cast<int>(m), w, ys, p, stream)
                  : launch_gemv_w4<scalar_t, 256>(xs, static_cast<int>(m), w, ys, p, stream);
  });
}

}  // namespace pagoda::cuda
