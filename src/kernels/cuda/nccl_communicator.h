#pragma once
// The GPU communicator: NCCL's collectives on the ranks' device buffers (PAGODA_CUDA builds only).
// Every call queues the collective on the communicator's stream and returns; barrier() waits for
// the stream. Pointers passed in are device pointers of this rank's GPU. NCCL_NVLS_ENABLE=0 is
// the caller's (the launcher's) setting: NVLink multicast stays off on shared hosts.
//
// Not yet run: the sharded CUDA model that would use it is to come; it compiles with the CUDA
// backend.
#include <array>
#include <string>

#include <cuda_runtime.h>

#include "core/communicator.h"

typedef struct ncclComm* ncclComm_t;

namespace pagoda::cuda {

class NcclCommunicator final : public Communicator {
 public:
  /// NCCL's unique id: rank 0 makes it, every rank gets it (e.g. over the CPU group's broadcast).
  using UniqueId = std::array<char, 128>;
  [[nodiscard]] static UniqueId make_unique_id();

  /// Joins the group (collective: every rank calls it with the same id). Internal on an NCCL error.
  NcclCommunicator(const UniqueId& id, int rank, int world_size, cudaStream_t stream);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  void all_reduce_sum(void* data, int64_t count, DType dtype) override;
  void all_gather(const void* in, void* out, size_t bytes) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  void abort(const std::string& why) override;

 private:
  void check_open() const;  // Internal once abort() ran

  ncclComm_t comm_ = nullptr;
  std::string aborted_;  // abort()'s reason
  cudaStream_t stream_;
  float* scratch_ = nullptr;  // [1] device: barrier()'s all-reduce
  int rank_;
  int world_size_;
};

}  // namespace pagoda::cuda
