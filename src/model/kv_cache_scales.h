#pragma once
// The per-layer scales of a quantized KV cache (fp8, int8) and the choice of the cache's dtype:
// what the CPU backend hands its cache kernels (kernels/cpu/kv_cache_codes.h). The scales live
// with the model's weights: the checkpoint's (ModelDefinition's kv_scale_names), 1.0, or computed
// from the first forward's K and V (--calculate-kv-scales), as vLLM's Attention layer does.
#include <string>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "model/definition.h"
#include "model/loader/safetensors.h"
#include "model/model.h"

namespace pagoda {

/// The CPU cache's dtype under `options`: --kv-cache-dtype's, else (auto) the checkpoint's
/// (definition.auto_kv_cache_dtype), else fp32. InvalidArgument naming the flag for a bad name,
/// and for --calculate-kv-scales on a cache that has no scales (fp32, bf16, f16).
[[nodiscard]] DType resolve_cpu_kv_cache_dtype(const ModelDefinition& definition,
                                               const KVCacheOptions& options);

/// Where a model's KV scales came from, for the start-up log.
struct KVScaleSource {
  int from_checkpoint = 0;  // layers whose k and v scales the checkpoint gave
  bool calculated = false;  // --calculate-kv-scales: the first forward sets them
};

/// Each layer's scales for a cache of `dtype`: 1.0 for unscaled dtypes and with
/// --calculate-kv-scales (set later by calculated_kv_scales); else the checkpoint's scalar
/// tensors, both or neither per layer (1.0 where absent). Checkpoint scales are calibrated for
/// fp8_e4m3 (max |x| / 448): an int8 cache takes s * 448 / 127 from them, so that the same
/// largest value maps to the largest code. InvalidArgument naming the tensor for a scale that is
/// not one positive finite float, or a layer with one of k and v.
[[nodiscard]] std::vector<cpu::KVScales> read_kv_cache_scales(const ModelDefinition& definition,
                                                              const WeightStore& weights,
                                                              DType dtype, bool calculate,
                                                              KVScaleSource* source);

/// vLLM's calc_kv_scales for one layer's K and V [n] (every token of the first forward): scale =
/// max |x| / range, range 200 for K and 100 for V in an fp8 cache (vLLM's K_SCALE_CONSTANT and
/// V_SCALE_CONSTANT), 127 for both in an int8 cache (vLLM has no int8 rule; the largest value
/// takes the largest code). A zero or non-finite maximum keeps 1.0.
/// Example (fp8): max |k| = 12.5 -> k scale 0.0625, codes up to 12.5 / 0.0625 = 200 (of 448).
[[nodiscard]] cpu::KVScales calculated_kv_scales(const float* k, const float* v, int64_t n,
                                                 DType dtype);

}  // namespace pagoda
