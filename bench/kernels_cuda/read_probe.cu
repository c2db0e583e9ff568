#include "read_probe.h"

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace {

__global__ void read_probe(const uint4* p, size_t n16, uint32_t* sink) {
  uint32_t acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n16;
       i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      v[u] = i + u * stride < n16 ? pagoda::cuda::load_stream16(p + i + u * stride)
                                  : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads alive; practically never taken
}

}  // namespace

cudaError_t launch_read_probe(const void* p, size_t bytes, int num_sms) {
  static uint32_t* sink = nullptr;
  if (sink == nullptr) {
    if (const cudaError_t e = cudaMalloc(&sink, sizeof(uint32_t)); e != cudaSuccess) return e;
  }
  read_probe<<<num_sms * 8, 256>>>(static_cast<const uint4*>(p), bytes / 16, sink);
  return cudaGetLastError();
}
