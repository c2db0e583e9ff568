// Whether kernels are launched as programmatic dependent launches (see common.cuh).
#include <cstdlib>

#include "kernels/cuda/common.cuh"

namespace pagoda::cuda {

bool dependent_launch_enabled() {
  static const bool enabled = [] {
    // Off by default: with the batch-1 GEMV fusions it measured 0.3-2% slower than plain launches
    // at batches 1, 16 and 64 on the H200 (docs/benchmarks.md); PAGODA_PDL=1 turns it on.
    const char* on = std::getenv("PAGODA_PDL");
    if (on == nullptr || on[0] == '\0' || on[0] == '0') return false;
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
