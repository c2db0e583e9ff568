#pragma once
// What the CUDA kernel benchmarks share: a call that must succeed (a benchmark has no recovery),
// and the timing protocol.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define CHECK_CUDA(expr)                                                                         \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

namespace pagoda::cuda::bench {

/// The Llama-3.1-8B projections, y[m, n] = x[m, k] w[n, k]^T (qkv and gate_up fused as the model
/// stores them).
struct ProjectionShape {
  const char* name;
  int64_t n, k;
};
inline constexpr ProjectionShape kLlama8bProjections[] = {{"qkv", 6144, 4096},
                                                          {"o", 4096, 4096},
                                                          {"gate_up", 28672, 4096},
                                                          {"down", 4096, 14336},
                                                          {"lm_head", 128256, 4096}};

/// Median milliseconds per call of fn(i) over `repeats` batches of `per_batch` calls (i counts
/// up across batches, so that callers rotate inputs), after one untimed batch.
inline double time_ms(const std::function<void(int)>& fn, int per_batch, int repeats = 15) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < per_batch; ++i) fn(i);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<double> ms;
  int call = 0;
  for (int r = 0; r < repeats; ++r) {
    CHECK_CUDA(cudaEventRecord(a));
    for (int i = 0; i < per_batch; ++i) fn(call++);
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0.0f;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(static_cast<double>(t) / per_batch);
  }
  CHECK_CUDA(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace pagoda::cuda::bench
