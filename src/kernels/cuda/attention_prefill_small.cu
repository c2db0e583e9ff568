// The prefill instantiations of the attention kernel for items of 64 rows (bf16/f16 x head dim
// 64/128): batches too small to fill the GPU with 128-row items.
#include "kernels/cuda/attention_kernel.cuh"

namespace pagoda::cuda::attention {

cudaError_t launch_prefill_small(const KernelArgs& args, int grid, cudaStream_t stream) {
  return launch_rows<kAttentionSmallTileRows>(args, grid, stream);
}

}  // namespace pagoda::cuda::attention
