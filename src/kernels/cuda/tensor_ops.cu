#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tensor_ops.h"

namespace pagoda::cuda {
namespace {

__global__ void convert_kernel(const void* src, DType sd, void* dst, DType dd, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    store_float(dst, dd, i, load_as_float(src, sd, i));
  }
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fill_uniform_kernel(void* dst, DType d, int64_t n, uint64_t seed, float offset,
                                    float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = splitmix64(seed + static_cast<uint64_t>(i));
    // As the CPU: the top 24 bits of the hash, scaled to [-1, 1), computed in double.
    const float u = static_cast<float>(static_cast<double>(h >> 40) / 8388608.0 - 1.0);
    const float v = offset + scale * u;
    if (d == DType::kF8E4M3) {  // FP8 dummy weights: core/fp8.h's float_to_e4m3 (RNE, saturating)
      static_cast<uint8_t*>(dst)[i] =
          static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
    } else if (d == DType::kI8) {
      // INT8 dummy weights: the CPU rounds offset + scale * u in double (half to even), clamped to
      // +-127; u is exact in float (24 bits), so the double product here is the CPU's.
      const double vd = static_cast<double>(offset) + static_cast<double>(scale) * u;
      static_cast<int8_t*>(dst)[i] = static_cast<int8_t>(fmin(127.0, fmax(-127.0, rint(vd))));
    } else {
      store_float(dst, d, i, v);
    }
  }
}

__global__ void gather_rows_kernel(const char* src, const int32_t* rows, int64_t row_bytes,
                                   char* dst, bool vec16) {
  const int64_t r = blockIdx.x;
  const char* s = src + static_cast<int64_t>(rows[r]) * row_bytes;
  char* o = dst + r * row_bytes;
  if (vec16) {
    for (int64_t i = threadIdx.x; i < row_bytes / 16; i += blockDim.x) {
      reinterpret_cast<int4*>(o)[i] = reinterpret_cast<const int4*>(s)[i];
    }
  } else {
    for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) o[i] = s[i];
  }
}

// One block per (row, layer): the layer's row of the source, or zeros, into its slice of dst.
__global__ void gather_layer_rows_kernel(const char* src, int64_t layer_bytes, int64_t row_bytes,
                                         const int32_t* rows, char* dst, bool vec16) {
  const int64_t r = blockIdx.x, l = blockIdx.y;
  const int32_t from = rows[r];
  char* o = dst + (r * gridDim.y + l) * row_bytes;
  const char* s = from < 0 ? src : src + l * layer_bytes + static_cast<int64_t>(from) * row_bytes;
  if (vec16) {
    for (int64_t i = threadIdx.x; i < row_bytes / 16; i += blockDim.x) {
      reinterpret_cast<int4*>(o)[i] =
          from < 0 ? make_int4(0, 0, 0, 0) : reinterpret_cast<const int4*>(s)[i];
    }
  } else {
    for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) o[i] = from < 0 ? 0 : s[i];
  }
}

__global__ void gather_ids_kernel(const int32_t* src, const int32_t* rows, int64_t n,
                                  int32_t* ids) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < n;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (rows[t] >= 0) ids[t] = src[rows[t]];
  }
}

__global__ void affine_kernel(void* x, DType d, int64_t n, float scale, float offset) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    store_float(x, d, i, fmaf(scale, load_as_float(x, d, i), offset));
  }
}

__global__ void add_kernel(const void* a, const void* b, void* out, DType d, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    store_float(out, d, i, load_as_float(a, d, i) + load_as_float(b, d, i));
  }
}

__global__ void softcap_kernel(void* x, DType d, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    store_float(x, d, i, cap * tanhf(load_as_float(x, d, i) * inv));
  }
}

__global__ void gather_columns_kernel(const void* src, int64_t src_cols, const int32_t* columns,
                                      int64_t dst_cols, void* dst, DType d) {
  const int64_t r = blockIdx.y;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < dst_cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t from = columns[c];
    store_float(dst, d, r * dst_cols + c,
                from >= 0 ? load_as_float(src, d, r * src_cols + from) : -INFINITY);
  }
}

int grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

cudaError_t convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t count,
                    cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  convert_kernel<<<grid_for(count), 256, 0, stream>>>(src, src_dtype, dst, dst_dtype, count);
  return cudaGetLastError();
}

cudaError_t fill_uniform(void* dst, DType dtype, int64_t count, uint64_t seed, float offset,
                         float scale, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  fill_uniform_kernel<<<grid_for(count), 256, 0, stream>>>(dst, dtype, count, seed, offset, scale);
  return cudaGetLastError();
}

cudaError_t affine(void* x, DType dtype, int64_t count, float scale, float offset,
                   cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  affine_kernel<<<grid_for(count), 256, 0, stream>>>(x, dtype, count, scale, offset);
  return cudaGetLastError();
}

cudaError_t add(const void* a, const void* b, void* out, DType dtype, int64_t count,
                cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  add_kernel<<<grid_for(count), 256, 0, stream>>>(a, b, out, dtype, count);
  return cudaGetLastError();
}

cudaError_t softcap(void* x, DType dtype, int64_t count, float cap, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  if (!(cap > 0)) return cudaErrorInvalidValue;
  softcap_kernel<<<grid_for(count), 256, 0, stream>>>(x, dtype, count, cap);
  return cudaGetLastError();
}

cudaError_t gather_rows(const void* src, const int32_t* rows, int64_t num_rows, int64_t row_bytes,
                        void* dst, cudaStream_t stream) {
  if (num_rows <= 0) return cudaSuccess;
  if (num_rows > 2147483647) return cudaErrorInvalidValue;
  const bool vec16 = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  gather_rows_kernel<<<static_cast<unsigned>(num_rows), 256, 0, stream>>>(
      static_cast<const char*>(src), rows, row_bytes, static_cast<char*>(dst), vec16);
  return cudaGetLastError();
}

cudaError_t gather_layer_rows(const void* src, int layers, int64_t layer_bytes, int64_t row_bytes,
                              const int32_t* rows, int64_t num_rows, void* dst,
                              cudaStream_t stream) {
  if (num_rows <= 0) return cudaSuccess;
  if (num_rows > 2147483647 || layers < 1 || layers > 65535 || row_bytes <= 0)
    return cudaErrorInvalidValue;
  const bool vec16 = row_bytes % 16 == 0 && layer_bytes % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(num_rows), static_cast<unsigned>(layers));
  gather_layer_rows_kernel<<<grid, 256, 0, stream>>>(
      static_cast<const char*>(src), layer_bytes, row_bytes, rows, static_cast<char*>(dst), vec16);
  return cudaGetLastError();
}

cudaError_t gather_ids(const int32_t* src, const int32_t* rows, int64_t n, int32_t* ids,
                       cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 1024));
  gather_ids_kernel<<<blocks, 256, 0, stream>>>(src, rows, n, ids);
  return cudaGetLastError();
}

cudaError_t gather_columns(const void* src, int64_t rows, int64_t src_cols, const int32_t* columns,
                           int64_t dst_cols, void* dst, DType dtype, cudaStream_t stream) {
  if (rows <= 0 || dst_cols <= 0) return cudaSuccess;
  if (rows > 65535 || src_cols <= 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(std::min(grid_for(dst_cols), 1024)),
                  static_cast<unsigned>(rows));
  gather_columns_kernel<<<grid, 256, 0, stream>>>(src, src_cols, columns, dst_cols, dst, dtype);
  return cudaGetLastError();
}

}  // namespace pagoda::cuda
