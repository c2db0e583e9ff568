// INT8 W8A8 around the GEMMs: per-token int8 quantization of x (with the RMSNorm fused when the
// projection is), the scale epilogue after cuBLASLt's int32 product, the any-shape product, and
// linear_int8's choice between the GEMV and the GEMM.
//
// quantize_int8_rows, how it works: one block per row. With a norm, the row's sum of x^2 (a block
// sum) gives 1 / rms; then max|x'| (x' = x, or x / rms * g) gives the row's scale, and each element
// becomes q = rn(x' * (127 / max|x'|)), or rn(x' / s) for a static scale s, every product and
// quotient an IEEE fp32 operation (__fmul_rn, __fdiv_rn: no FMA contraction), rounded half to
// even and saturated, as kernels/cpu/quant_gemm.cc (a maximum is exact in any order, so the codes
// are the CPU's). Rows of k % 8 == 0 up to kVecThreads * 8 * 4 elements (16-byte aligned) are read
// once into registers, kV 16-byte vectors per thread of 512, all loads in flight together: at
// decode (m <= 8 blocks) the kernel is latency-bound, and one round of loads instead of a strided
// loop per pass is what its time is. Other rows: 256 threads, a strided loop per pass, the row
// re-read from L2. Worked example
// (k = 4, per token): x = [0.5, -2, 1, 0] gives max|x| = 2, s = 2 / 127 = 0.015748,
// 127 / 2 = 63.5, q = [rn(31.75), rn(-127), rn(63.5), 0] = [32, -127, 64, 0] (63.5: half to even).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear_int8.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int8_t to_int8_rn(float v) {
  const int r = __float2int_rn(v);  // half to even; out of range saturates to INT_MIN / INT_MAX
  return static_cast<int8_t>(min(127, max(-128, r)));
}

// Max (or sum) over the block; scratch holds kThreads / 32 floats, free on entry.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
  v = kMax ? warp_max(v) : warp_sum(v);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) r = kMax ? fmaxf(r, scratch[w]) : r + scratch[w];
  __syncthreads();  // scratch is free again
  return r;
}

// Row r = blockIdx.x of x [m, k] -> q [m, k], scales [m].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    quantize_int8_kernel(const T* __restrict__ x, int64_t k, float static_scale,
                         const T* __restrict__ gamma, float eps, int8_t* __restrict__ q,
                         float* __restrict__ scales) {
  __shared__ float scratch[kThreads / 32];
  begin_dependent_kernel();
  const int64_t r = blockIdx.x;
  const T* row = x + r * k;  // row r starts at element r * k (r = 2, k = 4096: element 8192)
  float inv_rms = 1.0f;
  if (gamma != nullptr) {
    float ss = 0.0f;
    for (int64_t l = threadIdx.x; l < k; l += kThreads) {
      const float v = to_float(row[l]);
      ss = fmaf(v, v, ss);
    }
    inv_rms = rsqrtf(block_reduce<false>(ss, scratch) / static_cast<float>(k) + eps);
  }
  const auto value = [&](int64_t l) {
    const float v = to_float(row[l]);
    return gamma != nullptr ? __fmul_rn(__fmul_rn(v, inv_rms), to_float(gamma[l])) : v;
  };
  int8_t* out = q + r * k;
  if (static_scale > 0.0f) {
    if (threadIdx.x == 0) scales[r] = static_scale;
    for (int64_t l = threadIdx.x; l < k; l += kThreads)
      out[l] = to_int8_rn(__fdiv_rn(value(l), static_scale));
    return;
  }
  float amax = 0.0f;
  for (int64_t l = threadIdx.x; l < k; l += kThreads) amax = fmaxf(amax, fabsf(value(l)));
  amax = block_reduce<true>(amax, scratch);
  if (threadIdx.x == 0) scales[r] = amax > 0.0f ? __fdiv_rn(amax, 127.0f) : 0.0f;
  const float inv = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
  for (int64_t l = threadIdx.x; l < k; l += kThreads)
    out[l] = amax > 0.0f ? to_int8_rn(__fmul_rn(value(l), inv)) : int8_t{0};
}

constexpr int kVecThreads = 512;

// The vector path: row r = blockIdx.x, vector v = threadIdx.x + j * kVecThreads (j < kV) holds
// elements [8 v, 8 v + 8) (k = 4096: 512 vectors, kV = 1; k = 14336: 1792, kV = 4).
template <typename T, int kV>
__global__ void __launch_bounds__(kVecThreads)
    quantize_int8_vec_kernel(const T* __restrict__ x, int64_t k, float static_scale,
                             const T* __restrict__ gamma, float eps, int8_t* __restrict__ q,
                             float* __restrict__ scales) {
  __shared__ float scratch[kVecThreads / 32];
  begin_dependent_kernel();
  const int64_t r = blockIdx.x;
  const int64_t vecs = k / 8;
  float v[kV][8];
  float g[kV][8];
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int64_t vi = threadIdx.x + static_cast<int64_t>(j) * kVecThreads;
#pragma unroll
    for (int e = 0; e < 8; ++e) v[j][e] = g[j][e] = 0.0f;  // past the row: no effect on any sum
    if (vi < vecs) {
      load8(x + r * k + vi * 8, v[j]);
      if (gamma != nullptr) load8(gamma + vi * 8, g[j]);
    }
  }
  // Sum (or max) over the block, in a fixed order; scratch is free again on return.
  const auto reduce = [&](float a, bool is_max) {
    a = is_max ? warp_max(a) : warp_sum(a);
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = a;
    __syncthreads();
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kVecThreads / 32; ++w) t = is_max ? fmaxf(t, scratch[w]) : t + scratch[w];
    __syncthreads();
    return t;
  };
  if (gamma != nullptr) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kV; ++j)
#pragma unroll
      for (int e = 0; e < 8; ++e) ss = fmaf(v[j][e], v[j][e], ss);
    const float inv_rms = rsqrtf(reduce(ss, false) / static_cast<float>(k) + eps);
#pragma unroll
    for (int j = 0; j < kV; ++j)
#pragma unroll
      for (int e = 0; e < 8; ++e) v[j][e] = __fmul_rn(__fmul_rn(v[j][e], inv_rms), g[j][e]);
  }
  const bool by_division = static_scale > 0.0f;
  float inv = 0.0f;
  if (by_division) {
    if (threadIdx.x == 0) scales[r] = static_scale;
  } else {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kV; ++j)
#pragma unroll
      for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[j][e]));
    amax = reduce(amax, true);
    if (threadIdx.x == 0) scales[r] = amax > 0.0f ? __fdiv_rn(amax, 127.0f) : 0.0f;
    inv = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;  // a zero row: every code 0
  }
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int64_t vi = threadIdx.x + static_cast<int64_t>(j) * kVecThreads;
    if (vi >= vecs) continue;
    // Element e of the vector in byte e % 4 of word e / 4 (little-endian: q's order).
    uint32_t packed[2] = {0, 0};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float t = by_division ? __fdiv_rn(v[j][e], static_scale) : __fmul_rn(v[j][e], inv);
      packed[e / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(to_int8_rn(t))) << (8 * (e % 4));
    }
    *reinterpret_cast<uint2*>(q + r * k + vi * 8) = make_uint2(packed[0], packed[1]);
  }
}

// The W8A8 output rule of kernels/cpu/quant_gemm.h: float(acc) * x_scale * w_scale, then + bias.
template <typename T>
__device__ __forceinline__ T int8_output(int32_t acc, float xs, float ws, const T* bias,
                                         int64_t j) {
  float v = __fmul_rn(__fmul_rn(__int2float_rn(acc), xs), ws);
  if (bias != nullptr) v = __fadd_rn(v, to_float(bias[j]));
  return from_float<T>(v);
}

// Element (i = blockIdx.y, j = blockIdx.x * 256 + threadIdx.x) of acc [m, n] -> y [m, n].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    scale_epilogue_kernel(const int32_t* __restrict__ acc, const float* __restrict__ x_scale,
                          const float* __restrict__ w_scale, const T* __restrict__ bias, int64_t n,
                          T* __restrict__ y) {
  begin_dependent_kernel();
  const int64_t i = blockIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= n) return;
  y[i * n + j] = int8_output(acc[i * n + j], x_scale[i], w_scale[j], bias, j);
}

// One warp per output (i, j) of y [m, n]: warp w of block b computes output b * 8 + w, i.e.
// i = (b * 8 + w) / n, j = (b * 8 + w) % n (n = 37: output 40 is (1, 3)).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    int8_fallback_kernel(const int8_t* __restrict__ xq, const float* __restrict__ x_scale,
                         int64_t m, const int8_t* __restrict__ w, const float* __restrict__ w_scale,
                         const T* __restrict__ bias, int64_t n, int64_t k, T* __restrict__ y) {
  begin_dependent_kernel();
  const int64_t out = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (out >= m * n) return;
  const int64_t i = out / n, j = out % n;
  const int8_t* xr = xq + i * k;
  const int8_t* wr = w + j * k;
  int32_t acc = 0;
  for (int64_t l = threadIdx.x & 31; l < k; l += 32)
    acc += static_cast<int32_t>(xr[l]) * static_cast<int32_t>(wr[l]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) != 0) return;
  y[i * n + j] = int8_output(acc, x_scale[i], w_scale[j], bias, j);
}

bool aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7u) == 0; }

}  // namespace

cudaError_t quantize_int8_rows(const Int8QuantizeParams& p, cudaStream_t stream) {
  if (p.m == 0) return cudaSuccess;
  if (p.m < 0 || p.k <= 0 || p.m > 0x7fffffff || p.x == nullptr || p.q == nullptr ||
      p.x_scale == nullptr)
    return cudaErrorInvalidValue;
  // The vector path: 16-byte loads of x (and the norm weight), 8-byte stores of q.
  const int64_t vecs = p.k / 8;
  const bool vec = p.k % 8 == 0 && aligned16(p.x) && aligned16(p.norm_weight) &&
                   (reinterpret_cast<uintptr_t>(p.q) & 7u) == 0 && vecs <= 4 * kVecThreads;
  const dim3 grid(static_cast<unsigned>(p.m));
  PAGODA_DISPATCH_HALF(p.dtype, {
    const auto* x = static_cast<const scalar_t*>(p.x);
    const auto* g = static_cast<const scalar_t*>(p.norm_weight);
    if (vec && vecs <= kVecThreads)
      return launch_kernel(quantize_int8_vec_kernel<scalar_t, 1>, grid, kVecThreads, 0, stream, x,
                           p.k, p.static_scale, g, p.norm_eps, p.q, p.x_scale);
    if (vec && vecs <= 2 * kVecThreads)
      return launch_kernel(quantize_int8_vec_kernel<scalar_t, 2>, grid, kVecThreads, 0, stream, x,
                           p.k, p.static_scale, g, p.norm_eps, p.q, p.x_scale);
    if (vec)
      return launch_kernel(quantize_int8_vec_kernel<scalar_t, 4>, grid, kVecThreads, 0, stream, x,
                           p.k, p.static_scale, g, p.norm_eps, p.q, p.x_scale);
    return launch_kernel(quantize_int8_kernel<scalar_t>, grid, kThreads, 0, stream, x, p.k,
                         p.static_scale, g, p.norm_eps, p.q, p.x_scale);
  });
}

cudaError_t int8_scale_epilogue(const int32_t* acc, const float* x_scale, int64_t m,
                                const Int8WeightView& w, void* y, DType dtype,
                                cudaStream_t stream) {
  if (m == 0 || w.n == 0) return cudaSuccess;
  if (m < 0 || m > 65535 || w.n < 0 || acc == nullptr || x_scale == nullptr || w.scale == nullptr ||
      y == nullptr)
    return cudaErrorInvalidValue;
  const int64_t cols = (w.n + kThreads - 1) / kThreads;
  if (cols > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(cols), static_cast<unsigned>(m));
  PAGODA_DISPATCH_HALF(dtype, {
    return launch_kernel(scale_epilogue_kernel<scalar_t>, grid, kThreads, 0, stream, acc, x_scale,
                         w.scale, static_cast<const scalar_t*>(w.bias), w.n,
                         static_cast<scalar_t*>(y));
  });
}

cudaError_t linear_int8_fallback(const int8_t* xq, const float* x_scale, int64_t m,
                                 const Int8WeightView& w, void* y, DType dtype,
                                 cudaStream_t stream) {
  if (m == 0 || w.n == 0) return cudaSuccess;
  if (m < 0 || w.n < 0 || w.k <= 0 || xq == nullptr || x_scale == nullptr || w.w == nullptr ||
      w.scale == nullptr || y == nullptr)
    return cudaErrorInvalidValue;
  const int64_t blocks = (m * w.n + kThreads / 32 - 1) / (kThreads / 32);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  PAGODA_DISPATCH_HALF(dtype, {
    return launch_kernel(int8_fallback_kernel<scalar_t>, dim3(static_cast<unsigned>(blocks)),
                         kThreads, 0, stream, xq, x_scale, m, w.w, w.scale,
                         static_cast<const scalar_t*>(w.bias), w.n, w.k, static_cast<scalar_t*>(y));
  });
}

cudaError_t linear_int8(const BlasContext& ctx, const Int8LinearParams& p, cudaStream_t stream) {
  const Int8WeightView& w = p.w;
  if (p.m == 0 || w.n == 0) return cudaSuccess;
  Int8QuantizeParams qp;
  qp.x = p.x;
  qp.m = p.m;
  qp.k = w.k;
  qp.static_scale = p.input_scale;
  qp.q = p.xq;
  qp.x_scale = p.x_scale;
  qp.dtype = p.dtype;
  if (const cudaError_t e = quantize_int8_rows(qp, stream); e != cudaSuccess) return e;
  if (p.m <= kInt8GemvMaxM && w.k % 8 == 0 && aligned16(p.xq) && aligned8(w.w))
    return linear_int8_gemv(p.xq, p.x_scale, p.m, w, p.y, GemvFusion{}, p.dtype, stream);
  if (p.acc == nullptr) return linear_int8_fallback(p.xq, p.x_scale, p.m, w, p.y, p.dtype, stream);
  // Rows [r, r + rows) per call: xq + r * k, x_scale + r, y + r * n elements (r = 1024,
  // k = 4096, n = 6144: xq + 4 Mi bytes, y + 6 Mi elements).
  const size_t es = dtype_size(p.dtype);
  for (int64_t r = 0; r < p.m; r += kInt8GemmRows) {
    const int64_t rows = std::min(kInt8GemmRows, p.m - r);
    const int8_t* xq = p.xq + r * w.k;
    void* y = static_cast<char*>(p.y) + static_cast<size_t>(r * w.n) * es;
    cudaError_t e = int8_gemm_cublaslt(ctx, xq, rows, w, p.acc, stream);
    if (e == cudaErrorNotSupported)
      e = linear_int8_fallback(xq, p.x_scale + r, rows, w, y, p.dtype, stream);
    else if (e == cudaSuccess)
      e = int8_scale_epilogue(p.acc, p.x_scale + r, rows, w, y, p.dtype, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace pagoda::cuda
