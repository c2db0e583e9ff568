#pragma once
// RMSNorm on the GPU, fp32 statistics over 16-bit activations.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace pagoda::cuda {

/// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:] for r in [0, rows).
/// x, out: [rows, n] contiguous in dtype (bf16 or f16; out may equal x); weight: [n] in dtype.
/// With n = head_dim and rows = tokens * heads this is also the per-head q/k norm.
cudaError_t rms_norm(const void* x, const void* weight, int64_t rows, int64_t n, float eps,
                     void* out, DType dtype, cudaStream_t stream);

/// Fused residual add + RMSNorm: residual += x (rounded to dtype, in place), then
/// out = rms_norm(residual). residual, x, out: [rows, n] in dtype; out must not alias residual.
cudaError_t add_rms_norm(void* residual, const void* x, const void* weight, int64_t rows, int64_t n,
                         float eps, void* out, DType dtype, cudaStream_t stream);

}  // namespace pagoda::cuda
