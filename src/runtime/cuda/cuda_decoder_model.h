#pragma once
// The Llama-family decoder on one CUDA GPU: weights in device memory (q/k/v and gate/up fused into
// one projection each), bf16 or f16 activations with fp32 accumulation, the paged KV cache in the
// layout of kernels/cuda/kv_cache.h, and logits returned to the host for the requested rows only.
#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "model/eagle_head.h"
#include "model/model.h"

namespace pagoda {

/// Loads a checkpoint (or dummy weights) onto GPU `device` and returns it as a Model. The
/// activation dtype is `options.dtype` if set, else bf16 (f16 for f16 checkpoints): fp32
/// checkpoints are converted to bf16 on the device, as vLLM's "auto" does for bf16-capable GPUs.
[[nodiscard]] std::unique_ptr<Model> load_cuda_model(const std::string& model_dir,
                                                     const LoadOptions& options, int device,
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
