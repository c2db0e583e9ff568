#pragma once
// The Llama-family decoder on one CUDA GPU: weights in device memory (q/k/v and gate/up fused into
// one projection each), bf16 or f16 activations with fp32 accumulation, the paged KV cache in the
// layout of kernels/cuda/kv_cache.h, and logits returned to the host for the requested rows only.
#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "model/eagle_head.h"
#include "model/model.h"
#include "runtime/device_model.h"

namespace pagoda {

/// Loads a checkpoint (or dummy weights) onto GPU placement.device and returns it as a Model. The
/// activation dtype is `options.dtype` if set, else bf16 (f16 for f16 checkpoints): fp32
/// checkpoints are converted to bf16 on the device, as vLLM's "auto" does for bf16-capable GPUs.
/// With options.tensor_parallel.world > 1 the model is that rank's slices (model/tensor_parallel.h)
/// and its collectives go through placement.comm (runtime/device_model.h, place_gpu_rank).
[[nodiscard]] std::unique_ptr<Model> load_cuda_model(const std::string& model_dir,
                                                     const LoadOptions& options,
                                                     const GpuPlacement& placement,
                                                     ThreadPool& pool);

/// An EAGLE head (model/eagle_head.h, opened from `dir`) on GPU `device`, in the options' dtype
/// (else its config's, as load_cuda_model), its KV cache as a model's; its forward reads
/// ForwardBatch::input_hidden.
[[nodiscard]] std::unique_ptr<Model> load_cuda_eagle_head(EagleHeadCheckpoint head,
                                                          const std::string& dir,
                                                          const LoadOptions& options, int device,
                                                          ThreadPool& pool);

/// Number of CUDA devices usable by this process (0 when there is no driver or GPU).
[[nodiscard]] int cuda_device_count();

}  // namespace pagoda
