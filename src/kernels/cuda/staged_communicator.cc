#include "kernels/cuda/staged_communicator.h"

#include <algorithm>
#include <cstddef>

#include <fmt/format.h>

#include "core/status.h"
#include "kernels/cuda/tensor_ops.h"

namespace pagoda::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Internal(fmt::format("host-staged communicator: {}: {}", what, cudaGetErrorString(e)));
  }
}

}  // namespace

StagedCommunicator::StagedCommunicator(Communicator& host, cudaStream_t stream)
    : host_(host), stream_(stream) {}

StagedCommunicator::~StagedCommunicator() {
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);  // the last copy back
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  if (scratch_ != nullptr) cudaFree(scratch_);
}

void StagedCommunicator::prepare(size_t bytes, size_t scratch_bytes) {
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  if (bytes > pinned_bytes_) {
    const size_t grown = std::max(bytes, 2 * pinned_bytes_);
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    pinned_ = nullptr;
    pinned_bytes_ = 0;
    check(cudaMallocHost(&pinned_, grown), "cudaMallocHost");
    pinned_bytes_ = grown;
  }
  if (scratch_bytes > scratch_bytes_) {
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    check(cudaMalloc(&scratch_, scratch_bytes), "cudaMalloc");
    scratch_bytes_ = scratch_bytes;
  }
}

void StagedCommunicator::all_reduce_sum(void* data, int64_t count, DType dtype) {
  if (count <= 0) return;
  PAGODA_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
               "host-staged all_reduce_sum of {}", dtype_name(dtype));
  const auto n = static_cast<size_t>(count);
  // f16: summed as fp32 (scratch_), converted there and back on the stream.
  const bool widen = dtype == DType::kF16;
  const DType wire = widen ? DType::kF32 : dtype;
  const size_t bytes = n * dtype_size(wire);
  prepare(bytes, widen ? bytes : 0);
  void* src = data;
  if (widen) {
    check(convert(data, dtype, scratch_, DType::kF32, count, stream_), "convert to fp32");
    src = scratch_;
  }
  check(cudaMemcpyAsync(pinned_, src, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  host_.all_reduce_sum(pinned_, count, wire);
  check(cudaMemcpyAsync(src, pinned_, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
  if (widen) check(convert(scratch_, DType::kF32, data, dtype, count, stream_), "convert back");
}

void StagedCommunicator::all_gather(const void* in, void* out, size_t bytes) {
  const size_t world = static_cast<size_t>(world_size());
  // pinned_: [bytes] this rank's input, then [world, bytes] the gathered output.
  prepare(bytes * (world + 1));
  auto* mine = static_cast<std::byte*>(pinned_);
  std::byte* all = mine + bytes;
  check(cudaMemcpyAsync(mine, in, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  host_.all_gather(mine, all, bytes);
  check(cudaMemcpyAsync(out, all, bytes * world, cudaMemcpyHostToDevice, stream_),
        "copy to device");
}

void StagedCommunicator::broadcast(void* data, size_t bytes, int root) {
  prepare(bytes);
  check(cudaMemcpyAsync(pinned_, data, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  host_.broadcast(pinned_, bytes, root);
  check(cudaMemcpyAsync(data, pinned_, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
}

void StagedCommunicator::barrier() {
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  host_.barrier();
}

}  // namespace pagoda::cuda
