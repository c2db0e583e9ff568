// silu_and_mul and gelu_tanh_and_mul: a grid-stride loop over 8-element chunks (16-byte loads)
// when the rows allow it.
#include "kernels/cuda/activation.h"
#include "kernels/cuda/common.cuh"

namespace pagoda::cuda {
namespace {

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// PyTorch's gelu(approximate='tanh') in fp32: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
__device__ __forceinline__ float gelu_tanh(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

enum class Gate : uint8_t { kSilu, kGeluTanh };

template <Gate kGate>
__device__ __forceinline__ float gate_fn(float g) {
  if constexpr (kGate == Gate::kSilu) {
    return silu(g);
  } else {
    return gelu_tanh(g);
  }
}

template <typename T, int kVec, Gate kGate>
__global__ void gated_kernel(const T* gate, const T* up, int64_t rows, int64_t cols,
                             int64_t in_stride, T* out) {
  begin_dependent_kernel();
  const int64_t chunks_per_row = cols / kVec;
  const int64_t total = rows * chunks_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks_per_row, c = (i % chunks_per_row) * kVec;
    if constexpr (kVec == 8) {
      float g[8], u[8];
      load8(gate + r * in_stride + c, g);
      load8(up + r * in_stride + c, u);
#pragma unroll
      for (int j = 0; j < 8; ++j) g[j] = gate_fn<kGate>(g[j]) * u[j];
      store8(out + r * cols + c, g);
    } else {
      out[r * cols + c] = from_float<T>(gate_fn<kGate>(to_float(gate[r * in_stride + c])) *
                                        to_float(up[r * in_stride + c]));
    }
  }
}

template <Gate kGate>
cudaError_t gated(const void* gate, const void* up, int64_t rows, int64_t cols, int64_t in_stride,
                  void* out, DType dtype, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  PAGODA_DISPATCH_HALF(dtype, {
    const auto* g = static_cast<const scalar_t*>(gate);
    const auto* u = static_cast<const scalar_t*>(up);
    auto* o = static_cast<scalar_t*>(out);
    const bool vec =
        cols % 8 == 0 && in_stride % 8 == 0 && aligned16(g) && aligned16(u) && aligned16(o);
    const int64_t work = rows * (vec ? cols / 8 : cols);
    const int threads = 256;
    const auto blocks =
        static_cast<unsigned>(std::min<int64_t>((work + threads - 1) / threads, 65536));
    if (vec)
      launch_kernel(gated_kernel<scalar_t, 8, kGate>, blocks, threads, 0, stream, g, u, rows, cols,
                    in_stride, o);
    else
      launch_kernel(gated_kernel<scalar_t, 1, kGate>, blocks, threads, 0, stream, g, u, rows, cols,
                    in_stride, o);
    return cudaGetLastError();
  });
}

}  // namespace

cudaError_t silu_and_mul(const void* gate, const void* up, int64_t rows, int64_t cols,
                         int64_t in_stride, void* out, DType dtype, cudaStream_t stream) {
  return gated<Gate::kSilu>(gate, up, rows, cols, in_stride, out, dtype, stream);
}

cudaError_t gelu_tanh_and_mul(const void* gate, const void* up, int64_t rows, int64_t cols,
                              int64_t in_stride, void* out, DType dtype, cudaStream_t stream) {
  return gated<Gate::kGeluTanh>(gate, up, rows, cols, in_stride, out, dtype, stream);
}

}  // namespace pagoda::cuda
