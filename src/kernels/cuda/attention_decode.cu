// The decode instantiations of the attention kernel (16 rows; bf16/f16 x head dim 64/128).
#include "kernels/cuda/attention_kernel.cuh"

namespace pagoda::cuda::attention {

cudaError_t launch_decode(const KernelArgs& args, int grid, cudaStream_t stream) {
  return launch_rows<16>(args, grid, stream);
}

}  // namespace pagoda::cuda::attention
