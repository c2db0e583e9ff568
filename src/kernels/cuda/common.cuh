#pragma once
// Device helpers shared by the CUDA kernels: 16-byte vectors of 16-bit floats, conversions, warp
// reductions, and the one place where a runtime DType becomes a template type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"

namespace pagoda::cuda {

/// Conversions between the 16-bit storage types and fp32.
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

/// Element i of a bf16, f16 or (any other dtype) fp32 array whose dtype is known at run time only,
/// as fp32; and the store back. For small or cold kernels: a hot one dispatches to a template.
__device__ __forceinline__ float load_as_float(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void store_float(void* p, DType d, int64_t i, float v) {
  switch (d) {
    case DType::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    case DType::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

/// Eight 16-bit floats: one 16-byte load or store.
template <typename T>
struct alignas(16) Vec8 {
  T v[8];
};

template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&out)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_float(h[i]);
}

template <typename T>
__device__ __forceinline__ void store8(T* p, const float (&in)[8]) {
  uint4 raw;
  T* h = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = from_float<T>(in[i]);
  *reinterpret_cast<uint4*>(p) = raw;
}

/// Streaming 16-byte load that bypasses L1 (weights are read once per call).
// load_stream16 with L2 asked to fetch the whole 256-byte segment from HBM: for streams whose
// neighbouring bytes other warps of the block read next (the tensor-core GEMV reads 64 bytes of
// each of 8 rows per instruction).
__device__ __forceinline__ uint4 load_stream16_l2_256(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets it.
/// `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = blockDim.x >> 5;
  v = lane < num_warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Programmatic dependent launch (Hopper), opt-in (PAGODA_PDL=1; see launch.cu for why it is off by
// default). Every kernel of this folder starts with begin_dependent_kernel() and is launched by
// launch_kernel(), which then lets the GPU start it while the kernel before it in the stream is
// still finishing: its blocks become resident and wait at griddepcontrol.wait until that kernel
// has completed and its writes are visible, instead of paying a launch gap after it.
// launch_dependents lets the next kernel be scheduled as soon as all of this one's blocks have
// started; it is safe that early because the next kernel waits for this one's completion anyway.

/// The first statement of every kernel: waits for the previous kernel in the stream (a no-op when
/// launched without the attribute or before sm_90), then allows the next one to be scheduled.
__device__ __forceinline__ void begin_dependent_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}

/// Whether launches use programmatic dependent launch: compute capability >= 9 and turned on with
/// set_dependent_launch (off by default: see launch.cu).
bool dependent_launch_enabled();

/// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when enabled.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = dependent_launch_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

}  // namespace pagoda::cuda

/// Runs the code after it with `scalar_t` bound to the CUDA type of a 16-bit activation DType;
/// other dtypes return cudaErrorInvalidValue from the enclosing function. The one dispatch point of
/// every elementwise/GEMV/attention family: each family instantiates bf16 and f16 only.
#define PAGODA_DISPATCH_HALF(dtype, ...)           \
  do {                                             \
    if ((dtype) == ::pagoda::DType::kBF16) {       \
      using scalar_t = __nv_bfloat16;              \
      __VA_ARGS__                                  \
    } else if ((dtype) == ::pagoda::DType::kF16) { \
      using scalar_t = __half;                     \
      __VA_ARGS__                                  \
    } else {                                       \
      return cudaErrorInvalidValue;                \
    }                                              \
  } while (0)
