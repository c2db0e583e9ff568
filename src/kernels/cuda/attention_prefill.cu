// The prefill instantiations of the attention kernel for items of 128 rows (bf16/f16 x head dim
// 64/128).
#include "kernels/cuda/attention_kernel.cuh"

namespace pagoda::cuda::attention {

cudaError_t launch_prefill(const KernelArgs& args, int grid, cudaStream_t stream) {
  return launch_rows<kAttentionTileRows>(args, grid, stream);
}

}  // namespace pagoda::cuda::attention
