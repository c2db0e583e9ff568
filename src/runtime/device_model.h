#pragma once
// Loading a model on the device the user asked for: "cpu", "cuda" (GPU 0) or "auto" (the GPU when
// pagoda was built with CUDA and one is present, else the CPU).
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

}  // namespace pagoda
