// RMSNorm: one block per row. The vector path reads 16 bytes per thread; the sum of squares is
// reduced in fp32 across the block, and the row is read a second time (from L1/L2) to scale it.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/norm.h"

namespace pagoda::cuda {
namespace {

// kAdd: residual (= x_io) += x first, in dtype, and normalise the updated residual.
template <typename T, bool kAdd, bool kVec>
__global__ void rms_norm_kernel(T* x_io, const T* x_add, const T* weight, int64_t n, float eps,
                                T* out) {
  begin_dependent_kernel();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  T* x = x_io + row * n;
  const T* xa = kAdd ? x_add + row * n : nullptr;
  T* y = out + row * n;
  float ss = 0.0f;
  if constexpr (kVec) {
    for (int64_t i = threadIdx.x * 8; i < n; i += blockDim.x * 8) {
      float v[8];
      load8(x + i, v);
      if constexpr (kAdd) {
        float a[8];
        load8(xa + i, a);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = to_float(from_float<T>(v[j] + a[j]));
        store8(x + i, v);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) ss += v[j] * v[j];
    }
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float v = to_float(x[i]);
      if constexpr (kAdd) {
        const T r = from_float<T>(v + to_float(xa[i]));
        x[i] = r;
        v = to_float(r);
      }
      ss += v * v;
    }
  }
  // Each thread re-reads only the elements it wrote, so no barrier is needed for the residual;
  // block_sum's barriers order everything else.
  const float inv_rms = rsqrtf(block_sum(ss, scratch) / static_cast<float>(n) + eps);
  if constexpr (kVec) {
    for (int64_t i = threadIdx.x * 8; i < n; i += blockDim.x * 8) {
      float v[8], w[8];
      load8(x + i, v);
      load8(weight + i, w);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = v[j] * inv_rms * w[j];
      store8(y + i, v);
    }
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      y[i] = from_float<T>(to_float(x[i]) * inv_rms * to_float(weight[i]));
  }
}

template <typename T, bool kAdd>
cudaError_t launch(T* x, const T* xa, const T* weight, int64_t rows, int64_t n, float eps, T* out,
                   cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  const bool vec =
      n % 8 == 0 && aligned16(x) && aligned16(weight) && aligned16(out) && (!kAdd || aligned16(xa));
  const int64_t lanes = vec ? n / 8 : n;
  const int threads =
      static_cast<int>(std::min<int64_t>(512, std::max<int64_t>(32, (lanes + 31) / 32 * 32)));
  if (vec)
    launch_kernel(rms_norm_kernel<T, kAdd, true>, static_cast<unsigned>(rows), threads, 0, stream,
                  x, xa, weight, n, eps, out);
  else
    launch_kernel(rms_norm_kernel<T, kAdd, false>, static_cast<unsigned>(rows), threads, 0, stream,
                  x, xa, weight, n, eps, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t rms_norm(const void* x, const void* weight, int64_t rows, int64_t n, float eps,
                     void* out, DType dtype, cudaStream_t stream) {
  PAGODA_DISPATCH_HALF(dtype, {
    return launch<scalar_t, false>(const_cast<scalar_t*>(static_cast<const scalar_t*>(x)), nullptr,
                                   static_cast<const scalar_t*>(weight), rows, n, eps,
                                   static_cast<scalar_t*>(out), stream);
  });
}

cudaError_t add_rms_norm(void* residual, const void* x, const void* weight, int64_t rows, int64_t n,
                         float eps, void* out, DType dtype, cudaStream_t stream) {
  PAGODA_DISPATCH_HALF(dtype, {
    return launch<scalar_t, true>(static_cast<scalar_t*>(residual), static_cast<const scalar_t*>(x),
                                  static_cast<const scalar_t*>(weight), rows, n, eps,
                                  static_cast<scalar_t*>(out), stream);
  });
}

}  // namespace pagoda::cuda
