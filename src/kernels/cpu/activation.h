#pragma once
// The gated MLP activations (SiLU: Llama, Qwen, Mistral, Phi-3; GELU-tanh: Gemma) and the
// elementwise soft-cap.
#include <cstdint>

#include "core/thread_pool.h"

namespace pagoda::cpu {

/// out[i] = silu(gate[i]) * up[i] over count elements, silu(x) = x / (1 + exp(-x)). fp32; out may
/// equal gate.
void silu_and_mul(const float* gate, const float* up, int64_t count, float* out, ThreadPool& pool);

/// out[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) = x / 2 * (1 + tanh(sqrt(2 / pi) * (x +
/// 0.044715 x^3))) (PyTorch's gelu with approximate='tanh'). fp32; out may equal gate.
void gelu_tanh_and_mul(const float* gate, const float* up, int64_t count, float* out,
                       ThreadPool& pool);

/// x[i] = cap * tanh(x[i] / cap) in place (Gemma-2's logit soft-capping), cap > 0.
void softcap(float* x, int64_t count, float cap, ThreadPool& pool);

/// x[i] *= factor in place.
void scale(float* x, int64_t count, float factor, ThreadPool& pool);

}  // namespace pagoda::cpu
