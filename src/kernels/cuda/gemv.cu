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
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kCols = 4;
constexpr int kUnroll = 2;

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

template <typename T, int M>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ y, int m, int64_t k, int64_t n) {
  __shared__ float partial[kThreads / 32][M * kCols];
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t chunks = k / 8;
  const T* wrow[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) wrow[c] = w + min(n0 + c, n - 1) * k;  // clamped, not stored

  float acc[M][kCols];
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[i][c] = 0.0f;

  uint4 wv[kUnroll][kCols];
  auto load_w = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
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
  for (int64_t base = threadIdx.x; base < chunks; base += kThreads * kUnroll) {
    if (base != threadIdx.x) load_w(base);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t ch = base + u * kThreads;
      if (ch >= chunks) break;
      float wf[kCols][8];
#pragma unroll
      for (int c = 0; c < kCols; ++c) unpack8(wv[u][c], wf[c], T{});
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i >= m) break;
        float xf[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(x + i * k + ch * 8)), xf, T{});
#pragma unroll
        for (int c = 0; c < kCols; ++c)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[i][c] = fmaf(xf[j], wf[c][j], acc[i][c]);
      }
    }
  }

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const float s = warp_sum(acc[i][c]);
      if (lane == 0) partial[warp][i * kCols + c] = s;
    }
  __syncthreads();
  if (threadIdx.x < M * kCols) {
    const int i = threadIdx.x / kCols, c = threadIdx.x % kCols;
    const int64_t col = n0 + c;
    if (i < m && col < n) {
      float s = 0.0f;
#pragma unroll
      for (int wi = 0; wi < kThreads / 32; ++wi) s += partial[wi][threadIdx.x];
      if (bias != nullptr) s += to_float(bias[col]);
      y[i * n + col] = from_float<T>(s);
    }
  }
}

template <typename T>
cudaError_t launch_gemv(const T* x, int m, int64_t k, const T* w, int64_t n, const T* bias, T* y,
                        cudaStream_t stream) {
  const int64_t blocks = (n + kCols - 1) / kCols;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks));
  // The one dispatch point of the GEMV family: five accumulator shapes per dtype.
  if (m == 1)
    launch_kernel(gemv_kernel<T, 1>, grid, kThreads, 0, stream, x, w, bias, y, m, k, n);
  else if (m == 2)
    launch_kernel(gemv_kernel<T, 2>, grid, kThreads, 0, stream, x, w, bias, y, m, k, n);
  else if (m <= 4)
    launch_kernel(gemv_kernel<T, 4>, grid, kThreads, 0, stream, x, w, bias, y, m, k, n);
  else if (m <= 8)
    launch_kernel(gemv_kernel<T, 8>, grid, kThreads, 0, stream, x, w, bias, y, m, k, n);
  else
    launch_kernel(gemv_kernel<T, 16>, grid, kThreads, 0, stream, x, w, bias, y, m, k, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t linear_gemv(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                        const void* bias, void* y, DType dtype, cudaStream_t stream) {
  if (n <= 0 || m <= 0) return m == 0 || n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  if (m > kGemvLimitM || k <= 0 || k % 8 != 0 || !aligned16(x) || !aligned16(w))
    return cudaErrorInvalidValue;
  PAGODA_DISPATCH_HALF(dtype, {
    return launch_gemv(static_cast<const scalar_t*>(x), static_cast<int>(m), k,
                       static_cast<const scalar_t*>(w), n, static_cast<const scalar_t*>(bias),
                       static_cast<scalar_t*>(y), stream);
  });
}

}  // namespace pagoda::cuda
