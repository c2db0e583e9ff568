#pragma once
// A ModelDefinition's weights on the GPU: every tensor of its weight table uploaded in the
// activation dtype (checkpoint tensors through weight_streamer.h, dummy ones drawn on the device),
// the sources of a fused projection (q, k, v; gate, up) stacked at their row offsets, norm weight
// offsets (Gemma's 1 + w) folded in. Nothing here knows a family's tensor names.
#include <cuda_runtime.h>

#include <functional>
#include <optional>
#include <vector>

#include "core/thread_pool.h"
#include "model/definition.h"
#include "model/loader/safetensors.h"
#include "pagoda/runtime_options.h"
#include "runtime/cuda/device_buffer.h"

namespace pagoda {

/// A projection on the GPU in its weight format. Dense: weight [out, in] and bias [out] (or
/// empty) in the activation dtype.
struct CudaLinear {
  WeightFormat format = WeightFormat::kDense;
  DType dtype = DType::kBF16;  // of the weight (and bias)
  int64_t out = 0;
  int64_t in = 0;
  DeviceBuffer weight;
  DeviceBuffer bias;
};

/// One layer's weights; the optional norms are empty buffers when the definition has none.
struct CudaLayerWeights {
  DeviceBuffer input_norm, pre_mlp_norm;            // [hidden]
  DeviceBuffer post_attention_norm, post_mlp_norm;  // [hidden] or empty
  DeviceBuffer q_norm, k_norm;                      // [head_dim] or empty
  CudaLinear qkv, o, gate_up, down;
};

struct CudaWeights {
  DeviceBuffer embed;  // [vocab, hidden]
  DeviceBuffer final_norm;
  CudaLinear lm_head;  // weight empty when tied: the embedding serves
  bool tied = false;
  std::vector<CudaLayerWeights> layers;

  [[nodiscard]] const DeviceBuffer& lm_head_weight() const { return tied ? embed : lm_head.weight; }
};

/// Where the weights come from: a checkpoint (host, mmapped) or, when `store` is empty, the dummy
/// recipe of model/dummy_weights.h drawn on the device.
struct CudaWeightSource {
  std::optional<WeightStore> store;
  uint64_t seed = 0;                     // dummy weights' seed
  std::function<void(double)> progress;  // fraction loaded; may be empty
};

/// Uploads `definition`'s weights to GPU `device` in `dtype`, checking each checkpoint tensor's
/// presence, shape and dtype (InvalidArgument naming the file and the tensor). Reads run on `pool`.
[[nodiscard]] CudaWeights upload_weights(const ModelDefinition& definition, CudaWeightSource source,
                                         DType dtype, int device, const RuntimeOptions& options,
                                         ThreadPool& pool, cudaStream_t stream);

}  // namespace pagoda
