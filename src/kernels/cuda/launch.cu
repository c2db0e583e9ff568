// Whether kernels are launched as programmatic dependent launches (see common.cuh).
#include <cstdlib>

#include "kernels/cuda/common.cuh"

namespace pagoda::cuda {

bool dependent_launch_enabled() {
  static const bool enabled = [] {
    const char* off = std::getenv("PAGODA_DISABLE_PDL");
    if (off != nullptr && off[0] != '\0' && off[0] != '0') return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      (void)cudaGetLastError();  // no device: launches will fail on their own
      return false;
    }
    return major >= 9;
  }();
  return enabled;
}

}  // namespace pagoda::cuda
