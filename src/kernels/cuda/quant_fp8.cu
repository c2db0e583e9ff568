// FP8 around the GEMMs: per-row quantization (activations per token, weights at load), the
// any-shape W8A8 product, and linear_fp8's choice between the GEMV and the W8A8 GEMM.
//
// quantize_fp8_rows, how it works: one block of 256 threads per row. Pass 1 reduces max|x| over
// the row (each thread a strided slice, then a warp and a block max), which gives the row's scale
// s; pass 2 re-reads the row (from L2: a row is at most a few tens of KB) and writes
// q = e4m3(x / s), saturated. Worked example (k = 4, rule kActivation): x = [0.5, -2, 1, 0] gives
// max|x| = 2, s = 2 / 448 = 0.004464, q = [e4m3(112), e4m3(-448), e4m3(224), 0] =
// [0x6e, 0xfe, 0x76, 0x00] (112 = 1.75 * 2^6: exponent field 13, mantissa 6).
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear_fp8.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kE4M3Max = 448.0f;

__device__ __forceinline__ uint8_t to_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float from_e4m3(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

// Row r = blockIdx.x of x [m, k] -> q [m, k], scales [m].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const T* __restrict__ x, int64_t k, float static_scale, Fp8ScaleRule rule,
                         uint8_t* __restrict__ q, float* __restrict__ scales) {
  __shared__ float scratch[kThreads / 32];
  begin_dependent_kernel();
  const int64_t r = blockIdx.x;
  const T* row = x + r * k;  // row r starts at element r * k (r = 2, k = 4096: element 8192)
  float s = static_scale;
  if (!(s > 0.0f)) {
    float amax = 0.0f;
    for (int64_t l = threadIdx.x; l < k; l += kThreads) amax = fmaxf(amax, fabsf(to_float(row[l])));
    amax = warp_max(amax);
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = amax;
    __syncthreads();
    amax = 0.0f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) amax = fmaxf(amax, scratch[w]);
    if (rule == Fp8ScaleRule::kWeight) {
      s = amax > 0.0f ? amax / kE4M3Max : 1.0f;
    } else {
      s = fmaxf(amax / kE4M3Max, 1.0f / (kE4M3Max * 512.0f));
    }
  }
  if (threadIdx.x == 0) scales[r] = s;
  uint8_t* out = q + r * k;
  for (int64_t l = threadIdx.x; l < k; l += kThreads) out[l] = to_e4m3(to_float(row[l]) / s);
}

// One warp per output (i, j) of y [m, n]: warp w of block b computes output b * 8 + w, i.e.
// i = (b * 8 + w) / n, j = (b * 8 + w) % n (n = 37: output 40 is (1, 3)).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    fp8_fallback_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ x_scale,
                        int64_t m, const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                        const T* __restrict__ bias, int64_t n, int64_t k, T* __restrict__ y) {
  begin_dependent_kernel();
  const int64_t out = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (out >= m * n) return;
  const int64_t i = out / n, j = out % n;
  const uint8_t* xr = xq + i * k;
  const uint8_t* wr = w + j * k;
  float acc = 0.0f;
  for (int64_t l = threadIdx.x & 31; l < k; l += 32)
    acc = fmaf(from_e4m3(xr[l]), from_e4m3(wr[l]), acc);
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) != 0) return;
  float v = acc * x_scale[i] * w_scale[j];
  if (bias != nullptr) v += to_float(bias[j]);
  y[i * n + j] = from_float<T>(v);
}

}  // namespace

cudaError_t quantize_fp8_rows(const void* x, int64_t m, int64_t k, float static_scale,
                              Fp8ScaleRule rule, uint8_t* q, float* scales, DType dtype,
                              cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  if (m < 0 || k <= 0 || m > 0x7fffffff || x == nullptr || q == nullptr || scales == nullptr)
    return cudaErrorInvalidValue;
  PAGODA_DISPATCH_HALF(dtype, {
    return launch_kernel(quantize_rows_kernel<scalar_t>, dim3(static_cast<unsigned>(m)), kThreads,
                         0, stream, static_cast<const scalar_t*>(x), k, static_scale, rule, q,
                         scales);
  });
}

cudaError_t linear_fp8_fallback(const uint8_t* xq, const float* x_scale, int64_t m,
                                const Fp8WeightView& w, void* y, DType dtype, cudaStream_t stream) {
  if (m == 0 || w.n == 0) return cudaSuccess;
  if (m < 0 || w.n < 0 || w.k <= 0 || xq == nullptr || x_scale == nullptr || w.w == nullptr ||
      w.scale == nullptr || y == nullptr)
    return cudaErrorInvalidValue;
  const int64_t blocks = (m * w.n + kThreads / 32 - 1) / (kThreads / 32);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  PAGODA_DISPATCH_HALF(dtype, {
    return launch_kernel(fp8_fallback_kernel<scalar_t>, dim3(static_cast<unsigned>(blocks)),
                         kThreads, 0, stream, xq, x_scale, m, w.w, w.scale,
                         static_cast<const scalar_t*>(w.bias), w.n, w.k, static_cast<scalar_t*>(y));
  });
}

cudaError_t linear_fp8(const BlasContext& ctx, const Fp8LinearParams& p, cudaStream_t stream) {
  const Fp8WeightView& w = p.w;
  if (p.m == 0 || w.n == 0) return cudaSuccess;
  const bool w_aligned8 = (reinterpret_cast<uintptr_t>(w.w) & 7u) == 0;
  if (p.m <= kFp8GemvMaxM && w.k % 8 == 0 && aligned16(p.x) && w_aligned8)
    return linear_fp8_gemv(p.x, p.m, w, p.y, GemvFusion{}, p.dtype, stream);
  if (p.weight_only) {
    // Rows [r, r + 8) of x and y: x + r * k and y + r * n elements (r = 16, k = 4096: x + 65536).
    const size_t es = dtype_size(p.dtype);
    for (int64_t r = 0; r < p.m; r += kFp8GemvMaxM) {
      const cudaError_t e =
          linear_fp8_gemv(static_cast<const char*>(p.x) + static_cast<size_t>(r * w.k) * es,
                          std::min(kFp8GemvMaxM, p.m - r), w,
                          static_cast<char*>(p.y) + static_cast<size_t>(r * w.n) * es, GemvFusion{},
                          p.dtype, stream);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  if (const cudaError_t e =
          quantize_fp8_rows(p.x, p.m, w.k, p.input_scale, Fp8ScaleRule::kActivation, p.xq,
                            p.x_scale, p.dtype, stream);
      e != cudaSuccess)
    return e;
  const cudaError_t e = linear_fp8_cublaslt(ctx, p.xq, p.x_scale, p.m, w, p.y, p.dtype, stream);
  if (e == cudaErrorNotSupported)
    return linear_fp8_fallback(p.xq, p.x_scale, p.m, w, p.y, p.dtype, stream);
  return e;
}

}  // namespace pagoda::cuda
