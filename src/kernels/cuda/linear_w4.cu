// The W4 projections' helpers and dispatch (linear_w4.h): the large-m path's dequantization into
// a dense scratch, the act-order gather of x, dummy codes, and linear_w4.
//
// dequantize_w4: one thread per qweight word (8 codes of one row): word w of an [n, k] weight is
// row j = w / (k / 8), positions i0 = 8 (w % (k / 8)) .. i0 + 7, group i0 / G; each value
// scale * (q - zero) is exact in fp32 (11 x 5 significant bits) and rounded once to the dtype, at
// column perm[i] (i without a permutation: then the 8 values go out as one 16-byte store).
// Example (k = 256, G = 128, no perm): word 185 is row 5, positions 200..207, group 1.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear_w4.h"

namespace pagoda::cuda {
namespace {

template <typename T>
__global__ void dequantize_w4_kernel(const uint32_t* __restrict__ qweight,
                                     const uint32_t* __restrict__ meta,
                                     const int32_t* __restrict__ perm, int64_t n, int64_t k,
                                     int64_t group_size, T* __restrict__ dense) {
  begin_dependent_kernel();
  const int64_t words_per_row = k / 8, groups = k / group_size;
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       w < n * words_per_row; w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = w / words_per_row, i0 = (w % words_per_row) * 8;
    const uint32_t word = qweight[w], mw = meta[j * groups + i0 / group_size];
    const float scale = __half2float(__ushort_as_half(static_cast<uint16_t>(mw & 0xffffu)));
    const auto zero = static_cast<int>(mw >> 16);
    float v[8];
#pragma unroll
    for (int t = 0; t < 8; ++t)
      v[t] = scale * static_cast<float>(static_cast<int>((word >> (4 * t)) & 0xfu) - zero);
    T* row = dense + j * k;
    if (perm == nullptr) {
      store8(row + i0, v);
    } else {
#pragma unroll
      for (int t = 0; t < 8; ++t) row[perm[i0 + t]] = from_float<T>(v[t]);
    }
  }
}

// One block per row of x: out[r, i] = x[r, perm[i]] (normalised: * inv_rms * gamma[perm[i]]).
template <typename T>
__global__ void gather_columns_kernel(const T* __restrict__ x, int64_t k,
                                      const int32_t* __restrict__ perm, const T* __restrict__ gamma,
                                      float eps, T* __restrict__ out) {
  __shared__ float scratch[32];
  begin_dependent_kernel();
  const T* row = x + blockIdx.x * k;
  float inv_rms = 1.0f;
  if (gamma != nullptr) {
    float s = 0.0f;
    for (int64_t l = threadIdx.x; l < k; l += blockDim.x) {
      const float v = to_float(row[l]);
      s = fmaf(v, v, s);
    }
    inv_rms = rsqrtf(block_sum(s, scratch) / static_cast<float>(k) + eps);
  }
  T* o = out + blockIdx.x * k;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    const int32_t l = perm[i];
    const float v = to_float(row[l]);
    o[i] = from_float<T>(gamma != nullptr ? v * inv_rms * to_float(gamma[l]) : v);
  }
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_random_words_kernel(uint32_t* dst, int64_t words, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = static_cast<uint32_t>(mix64(seed + static_cast<uint64_t>(i)) >> 32);
}

unsigned grid_for(int64_t threads) {
  return static_cast<unsigned>(std::min<int64_t>((threads + 255) / 256, 65535));
}

}  // namespace

cudaError_t dequantize_w4(const W4WeightView& w, void* dense, DType dtype, cudaStream_t stream) {
  if (w.n == 0) return cudaSuccess;
  if (w.n < 0 || w.k <= 0 || w.k % 8 != 0 || w.group_size <= 0 || w.k % w.group_size != 0 ||
      w.qweight == nullptr || w.meta == nullptr || dense == nullptr ||
      (w.perm == nullptr && !aligned16(dense)))
    return cudaErrorInvalidValue;
  const unsigned grid = grid_for(w.n * (w.k / 8));
  PAGODA_DISPATCH_HALF(dtype, {
    const cudaError_t e =
        launch_kernel(dequantize_w4_kernel<scalar_t>, grid, 256, 0, stream, w.qweight, w.meta,
                      w.perm, w.n, w.k, w.group_size, static_cast<scalar_t*>(dense));
    return e != cudaSuccess ? e : cudaGetLastError();
  });
}

cudaError_t gather_columns(const void* x, int64_t m, int64_t k, const int32_t* perm,
                           const void* norm_weight, float norm_eps, void* out, DType dtype,
                           cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  if (m < 0 || m > 0x7fffffff || k <= 0 || perm == nullptr || x == nullptr || out == nullptr)
    return cudaErrorInvalidValue;
  PAGODA_DISPATCH_HALF(dtype, {
    const cudaError_t e = launch_kernel(
        gather_columns_kernel<scalar_t>, dim3(static_cast<unsigned>(m)), 256, 0, stream,
        static_cast<const scalar_t*>(x), k, perm, static_cast<const scalar_t*>(norm_weight),
        norm_eps, static_cast<scalar_t*>(out));
    return e != cudaSuccess ? e : cudaGetLastError();
  });
}

cudaError_t fill_random_words(uint32_t* dst, int64_t words, uint64_t seed, cudaStream_t stream) {
  if (words <= 0) return cudaSuccess;
  fill_random_words_kernel<<<grid_for(words), 256, 0, stream>>>(dst, words, seed);
  return cudaGetLastError();
}

cudaError_t linear_w4(const BlasContext& ctx, const W4LinearParams& p, cudaStream_t stream) {
  if (p.m <= kW4ChunkedMaxM) {
    // Rows [r, r + 8) of x and y per call: e.g. m = 20 runs rows 0-7, 8-15, 16-19.
    const size_t es = dtype_size(p.dtype);
    for (int64_t r = 0; r < p.m; r += kW4GemvMaxM) {
      const cudaError_t e =
          linear_w4_gemv(static_cast<const char*>(p.x) + static_cast<size_t>(r * p.w.k) * es,
                         std::min(kW4GemvMaxM, p.m - r), p.w,
                         static_cast<char*>(p.y) + static_cast<size_t>(r * p.w.n) * es,
                         GemvFusion{}, p.x_scratch, p.dtype, stream);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  // The labelled first step for prefill: W expanded to the dense scratch, then the dense GEMM.
  // cuBLASLt directly rather than linear(): linear()'s GEMVs may read W before waiting for the
  // kernel that wrote it (linear.h), and m > kW4GemvMaxM is cuBLASLt's range anyway.
  if (p.dense == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t e = dequantize_w4(p.w, p.dense, p.dtype, stream); e != cudaSuccess)
    return e;
  const cudaError_t e =
      linear_cublaslt(ctx, p.x, p.m, p.w.k, p.dense, p.w.n, p.w.bias, p.y, p.dtype, stream);
  if (e != cudaErrorNotSupported) return e;
  return linear_fallback(p.x, p.m, p.w.k, p.dense, p.w.n, p.w.bias, p.y, p.dtype, stream);
}

}  // namespace pagoda::cuda
