// Whether kernels are launched as programmatic dependent launches (see common.cuh).
#include <atomic>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace pagoda::cuda {
namespace {

// Off by default: with the batch-1 GEMV fusions it measured 0.3-2% slower than plain launches at
// batches 1, 16 and 64 on the H200 (docs/benchmarks.md); RuntimeOptions::dependent_launch (the
// command line's PAGODA_PDL=1) turns it on for the GPU model that the process builds.
std::atomic<bool> g_dependent_launch{false};

}  // namespace

void set_dependent_launch(bool enabled) {
  bool on = false;
  if (enabled) {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess) {
      on = major >= 9;
    } else {
      (void)cudaGetLastError();  // no device: launches will fail on their own
    }
  }
  g_dependent_launch.store(on, std::memory_order_relaxed);
}

bool dependent_launch_enabled() { return g_dependent_launch.load(std::memory_order_relaxed); }

}  // namespace pagoda::cuda
