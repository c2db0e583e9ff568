#pragma once
// Loading a model on the device the user asked for: "cpu", "cuda" (GPU 0) or "auto" (the GPU when
// pagoda was built with CUDA and one is present, else the CPU).
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/thread_pool.h"
#include "model/eagle_head.h"
#include "model/model.h"

namespace pagoda {

/// Loads the model on `device`; throws InvalidArgument for an unknown device or "cuda" without a
/// GPU (or in a build without CUDA).
[[nodiscard]] std::unique_ptr<Model> load_model_on_device(const std::string& model_dir,
                                                          const LoadOptions& options,
                                                          const std::string& device,
                                                          ThreadPool& pool);

/// Loads an EAGLE head (model/eagle_head.h) on `device` (as load_model_on_device): the CPU's
/// decoder or the GPU's, from the same checkpoint and definition.
[[nodiscard]] std::unique_ptr<Model> load_eagle_head_on_device(const std::string& dir,
                                                               const EagleHeadOptions& eagle,
                                                               const LoadOptions& options,
                                                               const std::string& device,
                                                               ThreadPool& pool);

/// How a GPU rank's collectives travel (kernels/cuda/staged_communicator.h, nccl_communicator.h).
enum class GpuCommunicator {
  kNone,    // one rank: no collectives
  kStaged,  // through host memory and the CPU group's shared memory; eager (no CUDA graphs)
  kNccl,    // NCCL on the rank's stream; one rank per GPU
};

/// Where tensor-parallel rank `rank` of `world` runs on a machine of `device_count` GPUs.
struct GpuPlacement {
  int device = 0;  // rank % device_count
  GpuCommunicator comm = GpuCommunicator::kNone;
  int ranks_on_device = 1;  // ranks sharing `device` (each gets this share of its memory budget)
};

/// Rank r runs on GPU r % device_count. NCCL (`have_nccl`: built with it) when every rank has a
/// GPU of its own (world <= device_count), else the host-staged communicator, which lets ranks
/// share a GPU. Example: world 4 on 2 GPUs: ranks 0 and 2 on GPU 0, 1 and 3 on GPU 1, staged,
/// 2 ranks on each; world 2 on 8 GPUs: GPUs 0 and 1, NCCL.
[[nodiscard]] GpuPlacement place_gpu_rank(int rank, int world, int device_count, bool have_nccl);

/// Whether this build has the CUDA backend and sees a GPU.
[[nodiscard]] bool cuda_available();

/// vLLM's profile run, before the KV pool is sized: one forward of the largest step the
/// scheduler may build (`max_tokens`, cut into prefills of at most `max_model_len`, with a logits
/// row for up to max_num_seqs of them). A GPU model allocates its activation, attention and logits
/// buffers at their peak (what is then in use is what the KV pool must leave) and loads the
/// prefill kernels (cuBLASLt loads each lazily, and a lazy load waits for the GPU), so that none
/// of it lands on the first requests. Writes no KV (every slot is -1) and reads only the null
/// block, so a pool of two blocks suffices. Returns the seconds it took. An EAGLE head's run reads
/// zero hidden states of input_hidden_width floats per token (its widest input).
double profile_run(Model& model, int64_t max_tokens, int max_num_seqs, int64_t max_model_len,
                   int block_size, int64_t input_hidden_width = 0);

/// One decode step of each of the model's decode_graph_sizes(max_num_seqs), largest first, so
/// that their graphs are captured before the first request (after the KV pool is allocated: the
/// graphs bake its addresses in). Returns how many. hidden_layers: the layers every decode step
/// keeps (an EAGLE head's target layers; ForwardBatch::hidden_layers), part of the graphs' shape.
int capture_decode_graphs(Model& model, int max_num_seqs,
                          std::span<const int32_t> hidden_layers = {});

}  // namespace pagoda
