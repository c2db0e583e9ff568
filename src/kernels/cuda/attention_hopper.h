#pragma once
// The Hopper (sm_90a) prefill attention kernel (attention_hopper.cu): what it takes and its launch.
// Built only when the CUDA architectures include 90 (PAGODA_HOPPER_ATTENTION is then defined).
#include <cuda_runtime.h>

#include "kernels/cuda/paged_attention.h"

namespace pagoda::cuda::attention {

struct KernelArgs;

/// Whether the Hopper kernel takes these launches' 128-row prefill items: bf16/f16 with a cache of
/// the same dtype, head dim 64 or 128, a block size dividing 128, no soft-capping, 16-byte-aligned
/// caches, and a device of compute capability 9.0.
bool hopper_prefill_supports(const PagedAttentionParams& p);

/// Runs the plan's prefill items (128 rows, none split) over `grid` blocks.
cudaError_t launch_prefill_hopper(const KernelArgs& args, int grid, cudaStream_t stream);

}  // namespace pagoda::cuda::attention
