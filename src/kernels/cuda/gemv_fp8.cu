// linear_fp8_gemv: y = (x w^T) * scale + bias for m <= 8 with W in float8_e4m3fn, the decode-time
// FP8 projection (weight-only: x stays bf16/f16), bound by reading W's bytes once.
//
// How it works: gemv.cu's CUDA-core GEMV with one-byte weights. A block owns kCols = 4 output
// columns (W rows) and splits k across its 8 warps; a "chunk" is 8 consecutive elements of a row
// (an 8-byte load of W, a 16-byte load of x). Each thread keeps kU = 4 chunks x 4 rows of W in
// flight (8-byte no-L1 loads: the same 128 bytes in flight per thread as the bf16 GEMV's 2 x 16),
// widens them in registers (cvt e4m3x2 -> f16x2, exact, then to fp32) and accumulates
// x * e4m3(w) in fp32; the row's scale multiplies the finished dot product (one multiply per
// output instead of one per weight). The fusions are gemv.cu's (see its note): the RMSNorm of x
// from the same loads, the residual add by the writing thread, SiLU-and-mul by blocks that own
// gate and up rows, RoPE and the paged-cache write by blocks that own rotation pairs.
//
// Worked example of the addressing (plain, n = 4096, k = 4096): block 5 owns W rows 20..23; chunk
// ch of row 21 is bytes [21 * 4096 + 8 ch, + 8) of w and elements [8 ch, 8 ch + 8) of each x row;
// thread t of the block reads chunks t, t + 256, ... (kU = 4 of them per round).
#include <cuda_fp8.h>

#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_epilogue.cuh"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/linear_fp8.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kCols = kGemvCols;
constexpr int kUnroll = 4;

__device__ __forceinline__ uint2 load_stream8(const void* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
               : "=r"(r.x), "=r"(r.y)
               : "l"(p));
  return r;
}

// Eight e4m3 codes (byte i = element i) -> fp32, exactly (every e4m3 value is an f16 value).
__device__ __forceinline__ void unpack_e4m3x8(const uint2& raw, float (&out)[8]) {
  const uint32_t u[2] = {raw.x, raw.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(u[i] >> (16 * h));
      const __half2 v = __half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3));
      const float2 f = __half22float2(v);
      out[4 * i + 2 * h] = f.x;
      out[4 * i + 2 * h + 1] = f.y;
    }
  }
}

// kU: chunks per W row in flight per thread; at M >= 4 the accumulators take the registers, so 2
// (ptxas: 105-165 registers at M = 8 with 4, one block of 256 threads per SM).
template <typename T, int M, bool kNorm, GemvEpilogue E, int kU = (M >= 4 ? 2 : kUnroll)>
__global__ void __launch_bounds__(kThreads)
    gemv_fp8_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w,
                    const float* __restrict__ w_scale, const T* __restrict__ bias,
                    T* __restrict__ y, int m, int64_t k, int64_t n, GemvParams p) {
  // Per warp: M x kCols dot products, then M sums of squares of x when normalising.
  __shared__ float partial[kThreads / 32][M * (kCols + 1)];
  const T* __restrict__ gamma = static_cast<const T*>(p.norm_weight);  // non-null iff kNorm
  const int64_t chunks = k / 8;
  const uint8_t* wrow[kCols];
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

  uint2 wv[kU][kCols];
  auto load_w = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t ch = base + u * kThreads;
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        wv[u][c] = ch < chunks ? load_stream8(wrow[c] + ch * 8) : make_uint2(0, 0);
    }
  };
  // Weights never depend on the previous kernel: their first loads overlap its tail.
  load_w(threadIdx.x);
  begin_dependent_kernel();
  GemvOutput<T> out = gemv_output<T, E, M, kCols>(y, bias, m, n, k, p);
  if (out.writer) {
    out.scale = w_scale[gemv_block_row<E>(p, n, out.out_c)];
    if (out.paired && out.out_c < 2)
      out.scale_pair = w_scale[gemv_block_row<E>(p, n, out.out_c + 2)];
  }
  for (int64_t base = threadIdx.x; base < chunks; base += kThreads * kU) {
    if (base != threadIdx.x) load_w(base);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t ch = base + u * kThreads;
      if (ch >= chunks) break;
      float wf[kCols][8];
#pragma unroll
      for (int c = 0; c < kCols; ++c) unpack_e4m3x8(wv[u][c], wf[c]);
      float gf[8];
      if (kNorm) unpack8(__ldg(reinterpret_cast<const uint4*>(gamma + ch * 8)), gf, T{});
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i >= m) break;
        float xf[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(x + i * k + ch * 8)), xf, T{});
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
cudaError_t launch_gemv_fp8(const T* x, int m, const Fp8WeightView& wv, T* y, const GemvParams& p,
                            cudaStream_t stream) {
  const int64_t cols_per_block = p.epilogue == GemvEpilogue::kGatedSilu ? kCols / 2 : kCols;
  const int64_t blocks = (p.out_cols + cols_per_block - 1) / cols_per_block;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks));
  const T* bias = static_cast<const T*>(wv.bias);
  auto go = [&](auto kernel) {
    return launch_kernel(kernel, grid, kThreads, 0, stream, x, wv.w, wv.scale, bias, y, m, wv.k,
                         wv.n, p);
  };
  // Variants: a norm or an epilogue is a compile-time choice (the plain kernel keeps its registers
  // for W); fused products at m = 1 (decode) and m <= 8, plain ones at m = 1, 2, 4, 8.
  auto fused = [&](auto e) {
    constexpr GemvEpilogue E = decltype(e)::value;
    if constexpr (E == GemvEpilogue::kRopeCache) {  // registers: see gemv.cu
      if (p.norm_weight != nullptr && m == 1) return go(gemv_fp8_kernel<T, 1, true, E, 2>);
    }
    if (p.norm_weight != nullptr)
      return m == 1 ? go(gemv_fp8_kernel<T, 1, true, E>) : go(gemv_fp8_kernel<T, 8, true, E>);
    return m == 1 ? go(gemv_fp8_kernel<T, 1, false, E>) : go(gemv_fp8_kernel<T, 8, false, E>);
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
    e = go(gemv_fp8_kernel<T, 1, false, Epi::kStore>);
  else if (m == 2)
    e = go(gemv_fp8_kernel<T, 2, false, Epi::kStore>);
  else if (m <= 4)
    e = go(gemv_fp8_kernel<T, 4, false, Epi::kStore>);
  else
    e = go(gemv_fp8_kernel<T, 8, false, Epi::kStore>);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace

cudaError_t linear_fp8_gemv(const void* x, int64_t m, const Fp8WeightView& w, void* y,
                            const GemvFusion& fusion, DType dtype, cudaStream_t stream) {
  if (w.n <= 0 || m <= 0) return m == 0 || w.n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  if (m > kFp8GemvMaxM || w.scale == nullptr || (reinterpret_cast<uintptr_t>(w.w) & 7u) != 0)
    return cudaErrorInvalidValue;
  if (fusion.epilogue == GemvEpilogue::kRopeCache && fusion.rope.cache_dtype != dtype)
    return cudaErrorNotSupported;
  GemvParams p;
  // make_gemv_params checks w's 16-byte alignment for the bf16 GEMV; an FP8 row of k % 8 == 0
  // bytes is only 8-byte aligned, so x stands in for w there (w was checked above).
  if (const cudaError_t e = make_gemv_params(x, m, w.k, x, w.n, fusion, kCols / 2, &p);
      e != cudaSuccess)
    return e;
  PAGODA_DISPATCH_HALF(dtype, {
    return launch_gemv_fp8(static_cast<const scalar_t*>(x), static_cast<int>(m), w,
                           static_cast<scalar_t*>(y), p, stream);
  });
}

}  // namespace pagoda::cuda
