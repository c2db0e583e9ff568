// linear_int8_gemv: the W8A8 INT8 product for m <= 8 (decode) of an already quantized x, bound by
// reading W's bytes once.
//
// How it works: gemv_fp8.cu's CUDA-core GEMV with int8 operands on both sides. A block owns
// kCols = 4 output columns (W rows) and splits k across its 8 warps; a "chunk" is 16 consecutive
// elements of a row when k % 16 == 0, else 8 (one 16- or 8-byte load of W and of each xq row).
// Each thread keeps kU chunks x 4 rows of W in flight (no-L1 loads: 128 bytes per thread at
// m <= 2, as the bf16 GEMV) and accumulates with dp4a (four int8 products added to an int32 per
// instruction, one per 4 bytes of a chunk and row): the sums are exact int32,
// the CPU reference's (kernels/cpu/quant_gemm.cc). The block's end adds the warps' int32 partial
// sums (exact, any order) and the writer applies float(sum) * x_scale[i] * w_scale[j] + bias[j]
// (the CPU's operations in its order), then gemv_epilogue.cuh's stores: plain, residual
// accumulate, SiLU-and-mul over [gate; up], RoPE + the paged-cache write. The RMSNorm the other
// GEMVs fuse is applied before the quantization here (quantize_int8_rows), since the per-token
// scale needs the normalised row's max.
//
// Worked example of the addressing (plain, n = 4096, k = 4096: 16-byte chunks): block 5 owns W
// rows 20..23; chunk ch of row 21 is bytes [21 * 4096 + 16 ch, + 16) of w and of each xq row bytes
// [i * 4096 + 16 ch, + 16); thread t of the block reads chunks t, t + 256, ... (kU per round).
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_epilogue.cuh"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/linear_int8.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kCols = kGemvCols;

__device__ __forceinline__ uint2 load_stream8(const void* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
               : "=r"(r.x), "=r"(r.y)
               : "l"(p));
  return r;
}

// A chunk of kChunk bytes as 32-bit words (kChunk / 4 of them).
template <int kChunk>
struct Chunk {
  uint32_t w[kChunk / 4];
};

template <int kChunk>
__device__ __forceinline__ Chunk<kChunk> load_chunk_stream(const int8_t* p) {
  Chunk<kChunk> c;
  if constexpr (kChunk == 16) {
    const uint4 r = load_stream16(p);
    c.w[0] = r.x, c.w[1] = r.y, c.w[2] = r.z, c.w[3] = r.w;
  } else {
    const uint2 r = load_stream8(p);
    c.w[0] = r.x, c.w[1] = r.y;
  }
  return c;
}

template <int kChunk>
__device__ __forceinline__ Chunk<kChunk> load_chunk(const int8_t* p) {
  Chunk<kChunk> c;
  if constexpr (kChunk == 16) {
    const uint4 r = __ldg(reinterpret_cast<const uint4*>(p));
    c.w[0] = r.x, c.w[1] = r.y, c.w[2] = r.z, c.w[3] = r.w;
  } else {
    const uint2 r = __ldg(reinterpret_cast<const uint2*>(p));
    c.w[0] = r.x, c.w[1] = r.y;
  }
  return c;
}

__device__ __forceinline__ int32_t warp_sum_i32(int32_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// kU: chunks per W row in flight per thread (128 bytes at M <= 2); at M >= 4 the accumulators
// take the registers, so half of that.
template <typename T, int M, GemvEpilogue E, int kChunk,
          int kU = (M >= 4 ? 16 / kChunk : 32 / kChunk)>
__global__ void __launch_bounds__(kThreads)
    gemv_int8_kernel(const int8_t* __restrict__ xq, const float* __restrict__ x_scale,
                     const int8_t* __restrict__ w, const float* __restrict__ w_scale,
                     const T* __restrict__ bias, T* __restrict__ y, int m, int64_t k, int64_t n,
                     GemvParams p) {
  __shared__ int32_t partial[kWarps][M * kCols];
  const int64_t chunks = k / kChunk;
  const int8_t* wrow[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) wrow[c] = w + gemv_block_row<E>(p, n, c) * k;

  int32_t acc[M][kCols];
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[i][c] = 0;

  Chunk<kChunk> wv[kU][kCols];
  auto load_w = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t ch = base + u * kThreads;
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        wv[u][c] = ch < chunks ? load_chunk_stream<kChunk>(wrow[c] + ch * kChunk) : Chunk<kChunk>{};
    }
  };
  // Weights never depend on the previous kernel: their first loads overlap its tail.
  load_w(threadIdx.x);
  begin_dependent_kernel();
  GemvOutput<T> out = gemv_output<T, E, M, kCols>(y, bias, m, n, k, p);
  float xs = 0.0f;
  if (out.writer) {
    out.scale = w_scale[gemv_block_row<E>(p, n, out.out_c)];
    if (out.paired && out.out_c < 2)
      out.scale_pair = w_scale[gemv_block_row<E>(p, n, out.out_c + 2)];
    xs = x_scale[out.out_i];
  }
  for (int64_t base = threadIdx.x; base < chunks; base += kThreads * kU) {
    if (base != threadIdx.x) load_w(base);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t ch = base + u * kThreads;
      if (ch >= chunks) break;
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i >= m) break;
        const Chunk<kChunk> xv = load_chunk<kChunk>(xq + i * k + ch * kChunk);
#pragma unroll
        for (int c = 0; c < kCols; ++c)
#pragma unroll
          for (int q = 0; q < kChunk / 4; ++q)
            acc[i][c] =
                __dp4a(static_cast<int>(xv.w[q]), static_cast<int>(wv[u][c].w[q]), acc[i][c]);
      }
    }
  }

  // The block's end: each warp's sums to partial [kWarps][M * kCols] (slot i * kCols + c), then
  // each writer adds its slot over the warps and stores through gemv_store.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < M; ++i) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int32_t s = warp_sum_i32(acc[i][c]);
      if (lane == 0) partial[warp][i * kCols + c] = s;
    }
  }
  __syncthreads();
  if (!out.writer || (out.paired && out.out_c >= 2)) return;
  auto total = [&](int slot) {
    int32_t s = 0;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) s += partial[wi][slot];
    return s;
  };
  // float(sum) * x_scale * w_scale (+ bias, + the residual for kAccumulate), as the CPU.
  auto finished = [&](int slot, float ws, float prior) {
    const float v = __fmul_rn(__fmul_rn(__int2float_rn(total(slot)), xs), ws);
    return __fadd_rn(v, prior);
  };
  const int i = out.out_i, c = out.out_c;
  const float value = finished(i * kCols + c, out.scale, out.prior);
  const float other = out.paired ? finished(i * kCols + c + 2, out.scale_pair, out.prior_pair) : 0;
  gemv_store<T, E>(p, out.y, out.n, i, c, out.paired, value, other);
}

template <typename T, int kChunk>
cudaError_t launch_gemv_int8(const int8_t* xq, const float* x_scale, int m,
                             const Int8WeightView& wv, T* y, const GemvParams& p,
                             cudaStream_t stream) {
  const int64_t cols_per_block = p.epilogue == GemvEpilogue::kGatedSilu ? kCols / 2 : kCols;
  const int64_t blocks = (p.out_cols + cols_per_block - 1) / cols_per_block;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks));
  const T* bias = static_cast<const T*>(wv.bias);
  auto go = [&](auto kernel) {
    return launch_kernel(kernel, grid, kThreads, 0, stream, xq, x_scale, wv.w, wv.scale, bias, y, m,
                         wv.k, wv.n, p);
  };
  // Variants: the epilogue is a compile-time choice; fused products at m = 1 (decode) and m <= 8,
  // plain ones at m = 1, 2, 4, 8.
  auto fused = [&](auto e) {
    constexpr GemvEpilogue E = decltype(e)::value;
    return m == 1 ? go(gemv_int8_kernel<T, 1, E, kChunk>) : go(gemv_int8_kernel<T, 8, E, kChunk>);
  };
  using Epi = GemvEpilogue;
  cudaError_t e = cudaSuccess;
  if (p.epilogue == Epi::kAccumulate)
    e = fused(std::integral_constant<Epi, Epi::kAccumulate>{});
  else if (p.epilogue == Epi::kGatedSilu)
    e = fused(std::integral_constant<Epi, Epi::kGatedSilu>{});
  else if (p.epilogue == Epi::kRopeCache)
    e = fused(std::integral_constant<Epi, Epi::kRopeCache>{});
  else if (m == 1)
    e = go(gemv_int8_kernel<T, 1, Epi::kStore, kChunk>);
  else if (m == 2)
    e = go(gemv_int8_kernel<T, 2, Epi::kStore, kChunk>);
  else if (m <= 4)
    e = go(gemv_int8_kernel<T, 4, Epi::kStore, kChunk>);
  else
    e = go(gemv_int8_kernel<T, 8, Epi::kStore, kChunk>);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace

cudaError_t linear_int8_gemv(const int8_t* xq, const float* x_scale, int64_t m,
                             const Int8WeightView& w, void* y, const GemvFusion& fusion,
                             DType dtype, cudaStream_t stream) {
  if (w.n <= 0 || m <= 0) return m == 0 || w.n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  if (m > kInt8GemvMaxM || x_scale == nullptr || w.scale == nullptr ||
      fusion.norm_weight != nullptr || (reinterpret_cast<uintptr_t>(w.w) & 7u) != 0)
    return cudaErrorInvalidValue;
  if (fusion.epilogue == GemvEpilogue::kRopeCache && fusion.rope.cache_dtype != dtype)
    return cudaErrorNotSupported;
  GemvParams p;
  // make_gemv_params checks 16-byte alignment of x and w for the bf16 GEMV; an int8 row of
  // k % 8 == 0 bytes is only 8-byte aligned, so xq stands in for w there (w was checked above).
  if (const cudaError_t e = make_gemv_params(xq, m, w.k, xq, w.n, fusion, kCols / 2, &p);
      e != cudaSuccess)
    return e;
  // 16-byte chunks where every row start is 16-byte aligned (xq was checked above).
  const bool wide = w.k % 16 == 0 && aligned16(w.w);
  PAGODA_DISPATCH_HALF(dtype, {
    auto* out = static_cast<scalar_t*>(y);
    const int mi = static_cast<int>(m);
    return wide ? launch_gemv_int8<scalar_t, 16>(xq, x_scale, mi, w, out, p, stream)
                : launch_gemv_int8<scalar_t, 8>(xq, x_scale, mi, w, out, p, stream);
  });
}

}  // namespace pagoda::cuda
