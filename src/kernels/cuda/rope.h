#pragma once
// Rotary position embedding fused with the write of keys and values into the paged cache.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/kv_cache.h"

namespace pagoda::cuda {

/// Inputs of rope_and_cache. q, k and v may be views into one fused qkv projection output
/// ([num_tokens, (num_heads + 2 * num_kv_heads) * head_dim]): each has its own token stride.
struct RopeCacheParams {
  void* q = nullptr;        // [num_tokens, num_heads, head_dim], token stride q_stride; rotated
  void* k = nullptr;        // [num_tokens, num_kv_heads, head_dim], token stride k_stride; rotated
  const void* v = nullptr;  // [num_tokens, num_kv_heads, head_dim], token stride v_stride
  int64_t q_stride = 0;     // elements between tokens
  int64_t k_stride = 0;
  int64_t v_stride = 0;
  const int32_t* positions = nullptr;     // [num_tokens]
  const float* inv_freq = nullptr;        // [head_dim / 2] fp32, scaling already applied
  const int64_t* slot_mapping = nullptr;  // [num_tokens]; slot < 0: rotate but do not cache
  void* key_cache = nullptr;              // KVCacheLayout, dtype
  void* value_cache = nullptr;            // KVCacheLayout, dtype
  int64_t num_tokens = 0;
  int num_heads = 0;
  KVCacheLayout layout;        // layout.head_dim and layout.num_kv_heads describe q, k and v too
  DType dtype = DType::kBF16;  // of q, k and v
  // Of the caches: dtype, or one-byte codes (kF8E4M3, kF8E5M2, kI8: kv_quant.cuh) of the
  // dtype-rounded value / the layer's scale (device [1] fp32 each; null: 1).
  DType cache_dtype = DType::kBF16;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  // Per-head q/k RMSNorm before the rotation (Qwen3), both or neither: each head of q (k) becomes
  // x / sqrt(mean(x^2) + norm_eps) * q_norm (k_norm), [head_dim] in dtype, rounded to dtype as
  // the separate rms_norm would write it.
  const void* q_norm = nullptr;
  const void* k_norm = nullptr;
  float norm_eps = 0.0f;
};

/// Rotates q and k in place in the rotate-half (GPT-NeoX / HF Llama) convention: element i pairs
/// with element i + head_dim / 2, angle = float(positions[t]) * inv_freq[i] in fp32, as
/// cpu::rope_neox; then writes the rotated k and the unchanged v of token t into slot
/// slot_mapping[t] of the caches (as cpu::reshape_and_cache, in the GPU layout). With q_norm and
/// k_norm set, each head is first normalised (cpu::rms_norm per head, then rounded to dtype).
cudaError_t rope_and_cache(const RopeCacheParams& params, cudaStream_t stream);

}  // namespace pagoda::cuda
