// Loading a model onto the GPU: the definition and its checks, the rank's slices with -tp N, the
// weight source and the dtypes (runtime/cuda/cuda_decoder_model.h).
#include <cstdlib>

#include "core/logging.h"
#include "kv/kv_cache_spec.h"
#include "model/dummy_weights.h"
#include "model/kv_cache_scales.h"
#include "model/registry.h"
#include "runtime/cuda/cuda_decoder.h"
#include "runtime/cuda/cuda_decoder_model.h"

namespace pagoda {

namespace {

// The GPU cache's dtype: --kv-cache-dtype's, else (auto) the checkpoint's, else the activation
// dtype. A 16-bit cache must be the activation dtype; fp32 is refused; scales are read, not
// calculated (--calculate-kv-scales is refused on the GPU for now).
DType cuda_kv_cache_dtype(const ModelDefinition& definition, const KVCacheOptions& options,
                          DType activations) {
  const std::optional<DType> flag = kv::parse_kv_cache_dtype(options.dtype);
  const DType dtype = flag.value_or(definition.auto_kv_cache_dtype.value_or(activations));
  if (!kv::kv_cache_dtype_scaled(dtype) && dtype != activations) {
    throw InvalidArgument(fmt::format(
        "--kv-cache-dtype {}: the GPU keeps an unquantized cache in the activation dtype ({}); "
        "pass auto, fp8, fp8_e5m2 or int8",
        options.dtype, dtype_name(activations)));
  }
  if (options.calculate_scales) {
    throw InvalidArgument(
        kv::kv_cache_dtype_scaled(dtype)
            ? "--calculate-kv-scales: not yet on the CUDA backend (the checkpoint's k/v scales, "
              "else 1.0, are used without it; --device cpu calculates them)"
            : fmt::format("--calculate-kv-scales: the KV cache is {}; scales are for fp8 and int8 "
                          "caches (--kv-cache-dtype fp8, fp8_e5m2 or int8)",
                          kv::kv_cache_dtype_name(dtype)));
  }
  return dtype;
}

/// A definition on the GPU, after the load path checked its formats: its weights from `store`
/// (dummy ones when empty), the dtypes from the options and the checkpoint.
std::unique_ptr<Model> build_cuda_model(const ModelConfig& config, ModelDefinition definition,
                                        std::optional<WeightStore> store, const std::string& source,
                                        const LoadOptions& options, const CudaRank& rank,
                                        ThreadPool& pool) {
  const int device = rank.placement.device;
  CudaWeightSource weights;
  weights.store = std::move(store);
  weights.embed_rows = vocab_shard(definition.vocab_size, rank.tp.rank, rank.tp.world).rows;
  weights.seed = options.seed;
  weights.progress = options.progress;
  const DType dtype =
      options.dtype.value_or(config.dtype == DType::kF16 ? DType::kF16 : DType::kBF16);
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    throw InvalidArgument(fmt::format(
        "--dtype {} is not supported on the GPU (bfloat16 or float16)", dtype_name(dtype)));
  }
  spdlog::info("model {}: {} with {} layers on GPU {} in {}", source, config.architecture,
               config.num_layers, device, dtype_name(dtype));
  CudaDTypes dtypes{dtype, cuda_kv_cache_dtype(definition, options.kv_cache, dtype), {}};
  if (kv::kv_cache_dtype_scaled(dtypes.kv_cache) && weights.store) {
    KVScaleSource from;
    dtypes.kv_scales = read_kv_cache_scales(definition, *weights.store, dtypes.kv_cache,
                                            /*calculate=*/false, &from);
    spdlog::info("KV cache {}: k/v scales of {} of {} layers from the checkpoint{}",
                 kv::kv_cache_dtype_name(dtypes.kv_cache), from.from_checkpoint,
                 definition.layers.size(), from.from_checkpoint == 0 ? " (the others 1.0)" : "");
  } else if (kv::kv_cache_dtype_scaled(dtypes.kv_cache)) {
    spdlog::info("KV cache {}: k/v scales 1.0 (dummy weights)",
                 kv::kv_cache_dtype_name(dtypes.kv_cache));
  }
  return std::make_unique<CudaDecoderModel>(config, std::move(definition), dtypes, rank,
                                            std::move(weights), options.runtime, pool);
}

}  // namespace

std::unique_ptr<Model> load_cuda_model(const std::string& model_dir, const LoadOptions& options,
                                       const GpuPlacement& placement, ThreadPool& pool) {
  const ModelConfig config = load_model_config(model_dir);
  ModelDefinition definition = define_model(config, options.definition);
  // The GPU runs dense, FP8 (per-tensor / per-channel, W8A8 or W8A16, and FP8 at load), INT8 W8A8
  // and 4-bit GPTQ / AWQ projections; a quantized LM head and the other formats still run on the
  // CPU only.
  const bool lm_head_quantized =
      !definition.lm_head_tied && definition.lm_head.format != WeightFormat::kDense;
  bool supported = !lm_head_quantized;
  for (const LayerDef& l : definition.layers)
    for (const LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down})
      supported = supported && cuda_supports(*lin);
  if (!supported) {
    throw InvalidArgument(fmt::format(
        "{}: quantized weights ({}) do not run on the GPU yet (it runs FP8 and INT8 W8A8 with "
        "per-tensor or per-channel scales, 4-bit GPTQ / AWQ with input features and group size "
        "multiples of 32, and a dense lm_head); pass --device cpu",
        model_dir, definition.weight_summary()));
  }
  std::optional<WeightStore> store;
  if (options.format == LoadFormat::kSafetensors) store = WeightStore::open_directory(model_dir);
  const CudaRank rank{placement, options.tensor_parallel};
  if (rank.tp.dcp > 1) {
    throw InvalidArgument(fmt::format(
        "--decode-context-parallel-size {}: the KV cache spread over ranks by position runs on "
        "the CPU backend only so far; pass --device cpu",
        rank.tp.dcp));
  }
  if (rank.tp.world > 1) {
    // The rank's slices of the checkpoint, by the CPU's rules (model/tensor_parallel.h); dummy
    // weights are drawn whole on the host first, then sliced alike.
    check_tensor_parallel(definition, rank.tp.world);
    if (!store) {
      store = make_dummy_weights(definition.tensors(), options.dtype.value_or(config.dtype),
                                 options.seed, pool, options.progress);
    }
    shard_weights(*store, definition, rank.tp.rank, rank.tp.world);
    definition = shard_definition(definition, rank.tp.rank, rank.tp.world);
    // NVLink multicast stays off unless the launcher says otherwise: on shared hosts it can take
    // every GPU out of service (NCCL reads it when the communicator is created).
    if (placement.comm == GpuCommunicator::kNccl) ::setenv("NCCL_NVLS_ENABLE", "0", 0);
  }
  return build_cuda_model(config, std::move(definition), std::move(store), model_dir, options, rank,
                          pool);
}

std::unique_ptr<Model> load_cuda_eagle_head(EagleHeadCheckpoint head, const std::string& dir,
                                            const LoadOptions& options, int device,
                                            ThreadPool& pool) {
  // EAGLE heads are dense (define_eagle_head): their fc, layer and LM head upload as they are.
  CudaRank rank;  // one rank: heads are not sharded (-tp N refuses draft models)
  rank.placement.device = device;
  return build_cuda_model(head.config, std::move(head.definition), std::move(head.weights), dir,
                          options, rank, pool);
}

}  // namespace pagoda
