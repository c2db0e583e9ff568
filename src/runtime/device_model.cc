#include "runtime/device_model.h"

#include "core/status.h"
#ifdef PAGODA_HAVE_CUDA
#include "runtime/cuda/cuda_decoder_model.h"
#endif

namespace pagoda {

bool cuda_available() {
#ifdef PAGODA_HAVE_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<Model> load_model_on_device(const std::string& model_dir,
                                            const LoadOptions& options, const std::string& device,
                                            ThreadPool& pool) {
  if (device != "auto" && device != "cpu" && device != "cuda") {
    throw InvalidArgument(fmt::format("--device '{}' must be auto, cpu or cuda", device));
  }
  const bool gpu = device == "cuda" || (device == "auto" && cuda_available());
  if (!gpu) return load_model(model_dir, options, pool);
#ifdef PAGODA_HAVE_CUDA
  if (cuda_device_count() == 0) throw InvalidArgument("--device cuda: no CUDA GPU is visible");
  return load_cuda_model(model_dir, options, /*device=*/0, pool);
#else
  throw InvalidArgument("--device cuda: this pagoda was built without CUDA (PAGODA_CUDA=OFF)");
#endif
}

}  // namespace pagoda
