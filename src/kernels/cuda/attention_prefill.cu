// The prefill instantiations of the attention kernel (bf16/f16 x head dim 64/128).
#include "kernels/cuda/attention_kernel.cuh"

namespace pagoda::cuda::attention {

cudaError_t launch_prefill(const KernelArgs& args, int grid, cudaStream_t stream) {
  const bool bf16 = args.p.dtype == DType::kBF16;
  switch (args.p.layout.head_dim) {
    case 64:
      return bf16 ? launch_attention<__nv_bfloat16, 64, false>(args, grid, stream)
                  : launch_attention<__half, 64, false>(args, grid, stream);
    case 128:
      return bf16 ? launch_attention<__nv_bfloat16, 128, false>(args, grid, stream)
                  : launch_attention<__half, 128, false>(args, grid, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace pagoda::cuda::attention
