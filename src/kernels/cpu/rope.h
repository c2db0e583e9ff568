#pragma once
// Rotary position embedding in the rotate-half convention of Hugging Face Llama (GPT-NeoX style):
// element i pairs with element i + rotary_dim / 2 of the same head.
#include <cstdint>

#include "core/thread_pool.h"

namespace pagoda::cpu {

/// Rotates q and k in place. q: [num_tokens, num_heads, head_dim], k: [num_tokens, num_kv_heads,
/// head_dim], fp32. positions: [num_tokens]. inv_freq: [head_dim / 2], the per-pair frequencies
/// with any scaling (linear, llama3) already applied. The angle is computed as float(position) *
/// inv_freq[i] in fp32, as transformers computes it.
void rope_neox(float* q, float* k, const int32_t* positions, int64_t num_tokens, int num_heads,
               int num_kv_heads, int head_dim, const float* inv_freq, ThreadPool& pool);

}  // namespace pagoda::cpu
