#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gumbel.cuh"
#include "kernels/cuda/sampling.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 1024;

// One block per row: each thread scans a strided part of the vocabulary keeping its best
// (value, index), then the block reduces; ties go to the lower index, as torch.argmax.
__global__ void sample_rows_kernel(const void* logits, DType dtype, int64_t vocab,
                                   const RowSample* params, int32_t* tokens) {
  const int64_t row = blockIdx.x;
  const RowSample p = params[row];
  const bool greedy = !(p.temperature > 0.0f);
  const float inv_t = greedy ? 1.0f : 1.0f / p.temperature;
  const uint64_t key = draw_key(p.seed, p.counter);
  float best = -FLT_MAX;
  int64_t best_i = vocab;  // "none yet": loses every tie
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    const float x = load_as_float(logits, dtype, row * vocab + v);
    if (x == -INFINITY || x != x) continue;  // masked or NaN: never drawn
    const float key_v = greedy ? x : x * inv_t + gumbel(key, v);
    if (key_v > best || (key_v == best && v < best_i)) {
      best = key_v;
      best_i = v;
    }
  }
  __shared__ float s_val[kThreads / 32];
  __shared__ int64_t s_idx[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    const float ov = __shfl_down_sync(0xffffffffu, best, offset);
    const int64_t oi = __shfl_down_sync(0xffffffffu, best_i, offset);
    if (ov > best || (ov == best && oi < best_i)) {
      best = ov;
      best_i = oi;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    s_val[warp] = best;
    s_idx[warp] = best_i;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    best = lane < warps ? s_val[lane] : -FLT_MAX;
    best_i = lane < warps ? s_idx[lane] : vocab;
    for (int offset = 16; offset > 0; offset /= 2) {
      const float ov = __shfl_down_sync(0xffffffffu, best, offset);
      const int64_t oi = __shfl_down_sync(0xffffffffu, best_i, offset);
      if (ov > best || (ov == best && oi < best_i)) {
        best = ov;
        best_i = oi;
      }
    }
    if (lane == 0) tokens[row] = static_cast<int32_t>(best_i < vocab ? best_i : 0);
  }
}

}  // namespace

cudaError_t sample_rows(const void* logits, DType dtype, int64_t rows, int64_t vocab,
                        const RowSample* params, int32_t* tokens, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab > INT32_MAX || rows > INT32_MAX) return cudaErrorInvalidValue;
  sample_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, dtype, vocab,
                                                                           params, tokens);
  return cudaGetLastError();
}

}  // namespace pagoda::cuda
