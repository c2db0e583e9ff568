#pragma once
// The CPU backend: a ModelDefinition run with fp32 activations over the checkpoint's weights,
// used in place (memory-mapped; only norm weights and biases are widened to fp32 copies). It is
// the reference the GPU backend is tested against.
#include <memory>

#include "model/loader/safetensors.h"
#include "model/model.h"
#include "ops/op_context.h"

namespace pagoda {

/// The CPU model of `definition` over `weights`, every tensor checked (presence, shape, dtype)
/// with InvalidArgument naming the file and the tensor. ctx: the thread pool and kernel settings
/// (the bf16 matmul mode) its ops run with. kv_cache: the cache's dtype and scales
/// (model/kv_cache_scales.h); InvalidArgument naming the flag when they cannot be honoured.
[[nodiscard]] std::unique_ptr<Model> build_cpu_model(const ModelConfig& config,
                                                     ModelDefinition definition,
                                                     WeightStore weights, const OpContext& ctx,
                                                     const KVCacheOptions& kv_cache = {},
                                                     const TensorParallel& tp = {});

}  // namespace pagoda
