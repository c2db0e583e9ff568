// Tensor parallelism on the GPU (-tp N): a CudaDecoderModel holding one rank's slices of the
// model (model/tensor_parallel.h, the same shard rules as the CPU) and the collectives between
// the ranks' kernels.
//
// How it works. The rank's definition and weights are already its slices, so attention, qkv and
// gate_up run unchanged on its heads and features, and its KV cache holds only its KV heads. Three
// places differ from one GPU: the embedding reads the rank's vocabulary rows (zeros for the other
// tokens) and is summed over the ranks; the o and down products are partial sums over the rank's
// input features, summed by an all-reduce before the residual add (cuda_forward.cc); the LM head
// computes the rank's vocabulary rows, all-gathered and placed at their columns of the logits.
// The collectives go through comm_: NCCL on stream_ when each rank has a GPU of its own, else the
// host-staged communicator (the ranks' shared memory), which drains the stream at every
// collective, so such a model runs eagerly (no CUDA graphs).
#include <cstdlib>

#include "core/logging.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/staged_communicator.h"
#include "kernels/cuda/tensor_ops.h"
#include "runtime/cuda/cuda_decoder.h"
#ifdef PAGODA_HAVE_NCCL
#include "kernels/cuda/nccl_communicator.h"
#endif

namespace pagoda {

void CudaDecoderModel::make_communicator(const CudaRank& rank) {
  if (tp_.world == 1) return;
  PAGODA_CHECK(
      tp_.comm != nullptr && tp_.comm->world_size() == tp_.world && tp_.comm->rank() == tp_.rank,
      "tensor-parallel rank {} of {} without its group's communicator", tp_.rank, tp_.world);
  if (def_.eagle) {
    throw InvalidArgument(fmt::format(
        "--tensor-parallel-size {}: an EAGLE head is not sharded on the GPU", tp_.world));
  }
  const char* how = "host-staged (shared memory)";
  if (rank.placement.comm == GpuCommunicator::kNccl) {
#ifdef PAGODA_HAVE_NCCL
    // Rank 0's NCCL id reaches the others over the host group.
    cuda::NcclCommunicator::UniqueId id{};
    if (tp_.rank == 0) id = cuda::NcclCommunicator::make_unique_id();
    tp_.comm->broadcast(id.data(), id.size(), 0);
    comm_ = std::make_unique<cuda::NcclCommunicator>(id, tp_.rank, tp_.world, stream_);
    how = "NCCL";
#else
    PAGODA_CHECK(false, "the NCCL communicator in a build without NCCL");
#endif
  } else {
    comm_ = std::make_unique<cuda::StagedCommunicator>(*tp_.comm, stream_);
  }
  // Collectives are not captured in the decode graphs yet (the staged one cannot be): eager.
  options_.cuda_graphs = false;
  spdlog::info(
      "tensor-parallel rank {} of {} on GPU {} ({} rank{} on it), {} communicator, eager (no CUDA "
      "graphs)",
      tp_.rank, tp_.world, device_, ranks_on_device_, ranks_on_device_ == 1 ? "" : "s", how);
}

void CudaDecoderModel::all_reduce(void* x, int64_t count) {
  if (comm_) comm_->all_reduce_sum(x, count, dtype_);
}

void CudaDecoderModel::embed(const StepInputs& in, int64_t T, void* out) {
  const int64_t h = def_.hidden_size;
  if (tp_.world == 1) {
    PAGODA_CUDA_CHECK(
        cuda::embedding(in.ids, T, w_.embed.get(), def_.vocab_size, h, out, dtype_, stream_));
  } else {
    const cuda::EmbeddingShard p{in.ids, T,   w_.embed.get(), vocab_.first, vocab_.rows,
                                 h,      out, dtype_};
    PAGODA_CUDA_CHECK(cuda::embedding_shard(p, stream_));
  }
  if (embed_scale_ != 1.0f)
    PAGODA_CUDA_CHECK(cuda::affine(out, dtype_, T * h, embed_scale_, 0.0f, stream_));
  // One rank holds each token's row, the others zeros: the sum is exact.
  all_reduce(out, T * h);
}

// Example: vocab 10 over 2 ranks (stride 5): rank 1's [L, 5] block lands at columns [5, 10) of
// each of the L logits rows; vocab 9: rank 1 has 4 rows, columns [5, 9).
void CudaDecoderModel::lm_head_tensor_parallel(const void* x, int64_t L) {
  const int64_t h = def_.hidden_size;
  const size_t es = dtype_size(dtype_);
  PAGODA_CUDA_CHECK(cuda::linear(blas_, x, L, h, w_.lm_head_weight().get(), vocab_.rows, nullptr,
                                 tp_head_.get(), dtype_, stream_));
  const size_t slice = static_cast<size_t>(L * vocab_.stride) * es;
  comm_->all_gather(tp_head_.get(), tp_gathered_.get(), slice);
  for (int r = 0; r < tp_.world; ++r) {
    const VocabShard s = vocab_shard(def_.vocab_size, r, tp_.world);
    PAGODA_CUDA_CHECK(cudaMemcpy2DAsync(
        logits_dtype_.at(static_cast<size_t>(s.first) * es),
        static_cast<size_t>(def_.vocab_size) * es, tp_gathered_.at(static_cast<size_t>(r) * slice),
        static_cast<size_t>(s.rows) * es, static_cast<size_t>(s.rows) * es, static_cast<size_t>(L),
        cudaMemcpyDeviceToDevice, stream_));
  }
}

}  // namespace pagoda
