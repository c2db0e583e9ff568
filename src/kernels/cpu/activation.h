#pragma once
// The gated MLP activation of Llama-family models.
#include <cstdint>

#include "core/thread_pool.h"

namespace pagoda::cpu {

/// out[i] = silu(gate[i]) * up[i] over count elements, silu(x) = x / (1 + exp(-x)). fp32; out may
/// equal gate.
void silu_and_mul(const float* gate, const float* up, int64_t count, float* out, ThreadPool& pool);

}  // namespace pagoda::cpu
