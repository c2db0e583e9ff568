#include "kernels/cuda/nccl_communicator.h"

#include <nccl.h>

#include <cstring>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::cuda {
namespace {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Internal(fmt::format("NCCL {}: {}", what, ncclGetErrorString(r)));
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Internal(fmt::format("NCCL {}: {}", what, cudaGetErrorString(e)));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    default:
      throw Internal(fmt::format("NCCL all_reduce_sum of {}", dtype_name(dtype)));
  }
}

}  // namespace

NcclCommunicator::UniqueId NcclCommunicator::make_unique_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  static_assert(sizeof(id) == sizeof(UniqueId));
  UniqueId out;
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

NcclCommunicator::NcclCommunicator(const UniqueId& id, int rank, int world_size,
                                   cudaStream_t stream)
    : stream_(stream), rank_(rank), world_size_(world_size) {
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), sizeof(nid));
  check(ncclCommInitRank(&comm_, world_size, nid, rank), "ncclCommInitRank");
  check(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc");
}

NcclCommunicator::~NcclCommunicator() {
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

void NcclCommunicator::check_open() const {
  if (comm_ == nullptr) throw Internal(fmt::format("NCCL communicator aborted: {}", aborted_));
}

void NcclCommunicator::all_reduce_sum(void* data, int64_t count, DType dtype) {
  check_open();
  check(ncclAllReduce(data, data, static_cast<size_t>(count), nccl_type(dtype), ncclSum, comm_,
                      stream_),
        "ncclAllReduce");
}

void NcclCommunicator::all_gather(const void* in, void* out, size_t bytes) {
  check_open();
  check(ncclAllGather(in, out, bytes, ncclInt8, comm_, stream_), "ncclAllGather");
}

void NcclCommunicator::broadcast(void* data, size_t bytes, int root) {
  check_open();
  check(ncclBroadcast(data, data, bytes, ncclInt8, root, comm_, stream_), "ncclBroadcast");
}

void NcclCommunicator::barrier() {
  check_open();
  check(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_),
        "ncclAllReduce (barrier)");
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (barrier)");
}

void NcclCommunicator::abort(const std::string& why) {
  // NCCL has no message channel: the peers see their collectives fail; this rank keeps `why`.
  aborted_ = why;
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
}

}  // namespace pagoda::cuda
