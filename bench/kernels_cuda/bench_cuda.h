#pragma once
// What the CUDA kernel benchmarks share: a call that must succeed (a benchmark has no recovery),
// and the timing protocol.
#include <cuda_runtime.h>

#include <algorithm>
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
