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

/// A projection on the GPU in its weight format.
///   dense          weight [out, in] in the activation dtype
///   kFp8,          weight [out, in] float8_e4m3fn, scale [out] fp32: each row's scale (a
///   kFp8Online     per-tensor scale repeated on its source's rows, so a fused qkv keeps q's, k's
///                  and v's own scales; per channel as the checkpoint has it; at load: max|w| /
///                  448)
///   kInt8          weight [out, in] int8 (the checkpoint's rows as they are), scale [out] fp32 as
///                  kFp8; activations quantized per token or by input_scale (W8A8)
///   kGptq, kAwq    4-bit, in the W4 layout (kernels/cpu/int4_repack.h, repacked on the host at
///                  load): weight = qweight [out, in / 8] uint32, meta [out, in / group_size]
///                  uint32 (fp16 scale | zero << 16), perm [in] int32 (act-order) or empty; the
///                  sources of a fused projection stacked by rows and sharing one permutation
/// bias [out] (or empty) in the activation dtype.
struct CudaLinear {
  WeightFormat format = WeightFormat::kDense;
  DType dtype = DType::kBF16;  // of the weight: the activation dtype, kF8E4M3, kI8, or kI32 (W4)
  int64_t out = 0;
  int64_t in = 0;
  DeviceBuffer weight;
  DeviceBuffer bias;
  DeviceBuffer scale;     // FP8, INT8: [out] fp32
  float input_scale = 0;  // FP8, INT8 static activations: the largest of the sources'; 0: per token
  bool weight_only = false;  // FP8 without input quantization (W8A16 checkpoints)
  DeviceBuffer meta;         // W4: [out, in / group_size] uint32
  DeviceBuffer perm;         // W4 act-order: [in] int32, or empty
  int64_t group_size = 0;    // W4

  [[nodiscard]] bool fp8() const { return dtype == DType::kF8E4M3; }
  [[nodiscard]] bool int8() const { return dtype == DType::kI8; }
  [[nodiscard]] bool w4() const {
    return format == WeightFormat::kGptq || format == WeightFormat::kAwq;
  }
};

/// Whether the GPU runs a projection of this format and quantization scheme: dense, FP8 with
/// per-tensor or per-channel weight scales and no or per-token or static activation scales, FP8
/// at load, INT8 W8A8 with per-tensor or per-channel weight scales and per-token or static
/// activation scales, 4-bit GPTQ / AWQ whose input features and group size are multiples of 32
/// (the W4 GEMV's 16-byte chunks). Others (block FP8, 8-bit GPTQ, FP4) are refused by
/// load_cuda_model by name.
[[nodiscard]] bool cuda_supports(const LinearDef& def);

/// One layer's weights; the optional norms are empty buffers when the definition has none.
struct CudaLayerWeights {
  DeviceBuffer input_norm, pre_mlp_norm;            // [hidden]
  DeviceBuffer post_attention_norm, post_mlp_norm;  // [hidden] or empty
  DeviceBuffer q_norm, k_norm;                      // [head_dim] or empty
  CudaLinear qkv, o, gate_up, down;
};

/// An EAGLE head's own tensors (model/definition.h, EagleHeadDef).
struct CudaEagleWeights {
  CudaLinear fc;             // [hidden, 2 hidden] (EAGLE-1) or [hidden, 3 target hidden]
  DeviceBuffer hidden_norm;  // EAGLE-3: [hidden]; EAGLE-1: empty
  // EAGLE-3 with a draft vocabulary: [vocab] int32, the draft id whose logit target id t gets
  // (-1: none), the inverse of d2t. Example: d2t [0, 0, 3] (draft ids 0, 1, 2 are target ids 0, 1,
  // 5) over a vocabulary of 8 gives [0, 1, -1, -1, -1, 2, -1, -1]. Empty: the whole vocabulary.
  DeviceBuffer target_columns;
};

struct CudaWeights {
  DeviceBuffer embed;       // [vocab, hidden]
  DeviceBuffer final_norm;  // [hidden]; empty for an EAGLE-1 head (none)
  CudaLinear lm_head;       // weight empty when tied: the embedding serves
  bool tied = false;
  std::vector<CudaLayerWeights> layers;  // an EAGLE-1 head's layer 0 has no input_norm
  CudaEagleWeights eagle;                // EAGLE heads only

  [[nodiscard]] const DeviceBuffer& lm_head_weight() const { return tied ? embed : lm_head.weight; }
};

/// Where the weights come from: a checkpoint (host, mmapped) or, when `store` is empty, the dummy
/// recipe of model/dummy_weights.h drawn on the device.
struct CudaWeightSource {
  std::optional<WeightStore> store;
  uint64_t seed = 0;                     // dummy weights' seed
  std::function<void(double)> progress;  // fraction loaded; may be empty
  // -tp N: the embedding's rows in `store` (its vocabulary slice, model/tensor_parallel.h's
  // vocab_shard); 0: the whole vocabulary.
  int64_t embed_rows = 0;
};

/// Uploads `definition`'s weights to GPU `device` in `dtype`, checking each checkpoint tensor's
/// presence, shape and dtype (InvalidArgument naming the file and the tensor). Reads run on `pool`.
[[nodiscard]] CudaWeights upload_weights(const ModelDefinition& definition, CudaWeightSource source,
                                         DType dtype, int device, const RuntimeOptions& options,
                                         ThreadPool& pool, cudaStream_t stream);

}  // namespace pagoda
