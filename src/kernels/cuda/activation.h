#pragma once
// The gated MLP activations on the GPU: SiLU (Llama, Qwen, Mistral, Phi-3), GELU-tanh (Gemma).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace pagoda::cuda {

/// out[r, c] = silu(gate[r, c]) * up[r, c], silu(x) = x / (1 + exp(-x)), computed in fp32 and
/// rounded once. gate, up: rows of `cols` elements, `in_stride` elements apart (for the fused
/// gate_up projection [rows, 2 * cols]: gate = y, up = y + cols, in_stride = 2 * cols). out:
/// [rows, cols] contiguous; may equal gate when in_stride == cols. dtype: bf16 or f16.
cudaError_t silu_and_mul(const void* gate, const void* up, int64_t rows, int64_t cols,
                         int64_t in_stride, void* out, DType dtype, cudaStream_t stream);

/// out = gelu_tanh(gate) * up with the layout of silu_and_mul; gelu_tanh(x) = x / 2 * (1 +
/// tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) in fp32 (Gemma's gelu_pytorch_tanh), rounded once.
cudaError_t gelu_tanh_and_mul(const void* gate, const void* up, int64_t rows, int64_t cols,
                              int64_t in_stride, void* out, DType dtype, cudaStream_t stream);

}  // namespace pagoda::cuda
