// linear_fallback: y = x w^T (+ bias) for any shape, the path of last resort of linear().
//
// Why it exists: the GEMV needs k % 8 == 0 and 16-byte rows, and cuBLASLt's heuristics may find no
// algorithm for 16-bit rows that are not 16-byte multiples (k or n not a multiple of 8, e.g.
// stories260K's down projection, k = 172) on some library versions. Such shapes only occur in
// small models, where one warp per output element (lanes stride over k, fp32 accumulation, 2-byte
// loads) costs nothing.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear.h"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 8;

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    linear_fallback_kernel(const T* __restrict__ x, const T* __restrict__ w,
                           const T* __restrict__ bias, T* __restrict__ y, int64_t m, int64_t k,
                           int64_t n) {
  const int lane = threadIdx.x & 31;
  const int64_t total = m * n;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  // Grid-stride over outputs, a warp at a time (the loop bound is uniform across the warp).
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); o < total;
       o += stride) {
    const int64_t i = o / n, j = o % n;
    const T* xr = x + i * k;
    const T* wr = w + j * k;
    float acc = 0.0f;
    for (int64_t e = lane; e < k; e += 32) acc = fmaf(to_float(xr[e]), to_float(wr[e]), acc);
    acc = warp_sum(acc);
    if (lane == 0) {
      if (bias != nullptr) acc += to_float(bias[j]);
      y[o] = from_float<T>(acc);
    }
  }
}

}  // namespace

cudaError_t linear_fallback(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                            const void* bias, void* y, DType dtype, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  if (m < 0 || n < 0 || k <= 0) return cudaErrorInvalidValue;
  const int64_t blocks = std::min<int64_t>((m * n + kWarps - 1) / kWarps, 65536);
  PAGODA_DISPATCH_HALF(dtype, {
    linear_fallback_kernel<scalar_t><<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(
        static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(w),
        static_cast<const scalar_t*>(bias), static_cast<scalar_t*>(y), m, k, n);
    return cudaGetLastError();
  });
}

}  // namespace pagoda::cuda
