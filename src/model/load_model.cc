#include <filesystem>

#include "core/logging.h"
#include "model/context_parallel.h"
#include "model/cpu_decoder.h"
#include "model/dummy_weights.h"
#include "model/model.h"
#include "model/registry.h"

namespace pagoda {

std::unique_ptr<Model> load_model(const std::string& model_dir, const LoadOptions& options,
                                  ThreadPool& pool) {
  const ModelConfig config = load_model_config(model_dir);
  ModelDefinition definition = define_model(config, options.definition);
  WeightStore weights =
      options.format == LoadFormat::kDummy
          ? make_dummy_weights(definition.tensors(), options.dtype.value_or(config.dtype),
                               options.seed, pool, options.progress)
          : WeightStore::open_directory(model_dir);
  // -tp N: the rank's slices replace the whole tensors (before --dtype converts only those).
  const TensorParallel& tp = options.tensor_parallel;
  if (tp.world > 1) {
    check_tensor_parallel(definition, tp.world);
    if (tp.dcp > 1) check_context_parallel(config.num_heads, config.num_kv_heads, tp.world, tp.dcp);
    shard_weights(weights, definition, tp.rank, tp.world);
    definition = shard_definition(definition, tp.rank, tp.world);
  }
  // --dtype with a checkpoint: the CPU backend computes with the weights where they lie, so
  // another dtype means owned copies, converted once here.
  if (options.format != LoadFormat::kDummy && options.dtype) {
    const size_t converted = weights.convert_floats(*options.dtype, pool);
    if (converted > 0) {
      spdlog::info("--dtype {}: {} checkpoint tensors converted from {} (held in memory)",
                   dtype_name(*options.dtype), converted, dtype_name(config.dtype));
    }
  }
  spdlog::info("model {}: {} with {} layers, hidden {}, {} heads ({} kv), head_dim {}, vocab {}",
               model_dir, config.architecture, config.num_layers, config.hidden_size,
               config.num_heads, config.num_kv_heads, config.head_dim, config.vocab_size);
  spdlog::info("weights: {}", definition.weight_summary());
  const OpContext ctx{
      &pool,
      {.batch_invariant = !options.cpu_onednn,
       .bf16 = options.cpu_bf16_round ? cpu::Bf16Matmul::kRound : cpu::Bf16Matmul::kExact}};
  return build_cpu_model(config, std::move(definition), std::move(weights), ctx, options.kv_cache,
                         tp);
}

}  // namespace pagoda
