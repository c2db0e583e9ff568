#pragma once
// The host-staged GPU communicator: a GPU rank's collectives through a host communicator (the CPU
// group of core/shm_communicator.h), so that several ranks can share one GPU, which NCCL refuses
// (one rank per device), or run where NCCL is missing.
//
// How it works. Each collective waits for the rank's stream (the data is the output of the kernels
// queued before it), copies the device data into a pinned host buffer, runs the host
// communicator's collective on it, and queues the copy back to the device on the stream (the
// kernels queued after it read the result in stream order). The host buffer is reused by the next
// collective only after the stream is drained again, so the copy back has finished by then. An
// all-reduce of f16 goes through fp32 (converted on the device: the host group sums fp32 and bf16
// only); bf16 and fp32 go as they are. Every call synchronizes the host with the stream, so
// nothing here can be captured in a CUDA graph: a model with this communicator runs eagerly.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/communicator.h"

namespace pagoda::cuda {

class StagedCommunicator final : public Communicator {
 public:
  /// `host`: the rank's host communicator (not owned; outlives this); `stream`: the rank's stream,
  /// on which the device pointers of every call are read and written.
  StagedCommunicator(Communicator& host, cudaStream_t stream);
  ~StagedCommunicator() override;
  StagedCommunicator(const StagedCommunicator&) = delete;
  StagedCommunicator& operator=(const StagedCommunicator&) = delete;

  int rank() const override { return host_.rank(); }
  int world_size() const override { return host_.world_size(); }
  /// data: device pointer, `count` elements of kF32, kBF16 or kF16.
  void all_reduce_sum(void* data, int64_t count, DType dtype) override;
  /// in: device [bytes], out: device [world_size, bytes].
  void all_gather(const void* in, void* out, size_t bytes) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  void abort(const std::string& why) override { host_.abort(why); }

 private:
  /// Drains the stream and grows the pinned buffer to `bytes` (and the device fp32 scratch to
  /// `scratch_bytes`); throws Internal on a CUDA error.
  void prepare(size_t bytes, size_t scratch_bytes = 0);

  Communicator& host_;
  cudaStream_t stream_;
  void* pinned_ = nullptr;  // [pinned_bytes_] host, page-locked
  size_t pinned_bytes_ = 0;
  void* scratch_ = nullptr;  // [scratch_bytes_] device: an f16 all-reduce's fp32 copy
  size_t scratch_bytes_ = 0;
};

}  // namespace pagoda::cuda
