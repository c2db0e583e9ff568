#pragma once
// Loading a model on the device the user asked for: "cpu", "cuda" (GPU 0) or "auto" (the GPU when
// pagoda was built with CUDA and one is present, else the CPU).
#include <cstdint>
#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "model/model.h"

namespace pagoda {

/// Loads the model on `device`; throws InvalidArgument for an unknown device or "cuda" without a
/// GPU (or in a build without CUDA).
[[nodiscard]] std::unique_ptr<Model> load_model_on_device(const std::string& model_dir,
                                                          const LoadOptions& options,
                                                          const std::string& device,
                                                          ThreadPool& pool);

/// Whether this build has the CUDA backend and sees a GPU.
[[nodiscard]] bool cuda_available();

/// vLLM's dummy run and graph capture, before the first request: one forward of the largest step
/// the scheduler may build (`max_tokens`, cut into prefills of at most `max_model_len`), then one
/// decode step of each of the model's decode_graph_sizes(max_num_seqs), largest first. A GPU model
/// allocates its activation and logits buffers at their peak, loads the prefill kernels (cuBLASLt
/// loads them lazily, on first use) and captures its decode graphs, so that none of it lands on
/// the first requests. Writes no KV (every slot is -1) and reads only the null block. Returns the
/// seconds it took.
double warm_up(Model& model, int64_t max_tokens, int max_num_seqs, int64_t max_model_len,
               int block_size);

}  // namespace pagoda
