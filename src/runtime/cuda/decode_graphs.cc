#include "runtime/cuda/decode_graphs.h"

#include <algorithm>
#include <bit>

#include "runtime/cuda/device_buffer.h"

namespace pagoda {

int64_t DecodeGraphs::bucket(int64_t t) {
  return t <= 8 ? static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(t))) : (t + 7) / 8 * 8;
}

std::vector<int> DecodeGraphs::buckets(int max_num_seqs) {
  std::vector<int> sizes;
  const int64_t last = bucket(std::min<int64_t>(std::max(max_num_seqs, 1), kMaxTokens));
  for (int64_t t = 1; t <= last; t = bucket(t + 1)) sizes.push_back(static_cast<int>(t));
  return sizes;
}

void DecodeGraphs::launch(const Key& key, cudaStream_t stream,
                          const std::function<void()>& record) {
  BucketGraph& g = graphs_[key.shape];
  if (g.exec == nullptr || g.key != key) {
    cudaGraph_t captured = nullptr;
    // Steps may be queued ahead of this one (chained passes): they finish before the capture
    // starts, so that it records this step's work alone. Captures are rare (a shape's first use).
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));
    PAGODA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      record();
    } catch (...) {
      (void)cudaStreamEndCapture(stream, &captured);
      if (captured != nullptr) cudaGraphDestroy(captured);
      throw;
    }
    PAGODA_CUDA_CHECK(cudaStreamEndCapture(stream, &captured));
    cudaError_t err = cudaErrorUnknown;
    if (g.exec != nullptr) {
      cudaGraphExecUpdateResultInfo info{};
      err = cudaGraphExecUpdate(g.exec, captured, &info);
      if (err != cudaSuccess) {  // another topology: instantiate afresh
        (void)cudaGetLastError();
        cudaGraphExecDestroy(g.exec);
        g.exec = nullptr;
      }
    }
    if (err != cudaSuccess) err = cudaGraphInstantiate(&g.exec, captured, 0);
    cudaGraphDestroy(captured);
    if (err != cudaSuccess) {
      graphs_.erase(key.shape);
      PAGODA_CUDA_CHECK(err);
    }
    g.key = key;
  }
  PAGODA_CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
}

void DecodeGraphs::clear() {
  for (auto& [slot, g] : graphs_) cudaGraphExecDestroy(g.exec);
  graphs_.clear();
}

}  // namespace pagoda
