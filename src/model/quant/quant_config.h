#pragma once
// Which weight format each projection of a checkpoint has: config.json's quantization_config (or
// a quantization side file: quantize_config.json, quant_config.json) read as vLLM reads it, and
// the --quantization flag with vLLM's method names, inferred from the config when absent.
//
//   method (--quantization)        quantization_config                    projections become
//   compressed-tensors             quant_method compressed-tensors,       kFp8 (float-quantized),
//                                  config_groups + ignore                 kInt8 (int-quantized),
//                                                                         kNvfp4 / kMxfp4
//   fp8                            quant_method fp8 (serialized)          kFp8
//   fp8 on an unquantized config   none                                   kFp8Online
//   gptq (gptq_marlin)             quant_method gptq                      kGptq
//   awq (awq_marlin)               quant_method awq, version gemm         kAwq
//   modelopt (modelopt_fp4)        quant_method modelopt (or the side     kFp8 (quant_algo FP8,
//                                  file hf_quant_config.json), quant_algo
//                                  FP8_PER_CHANNEL_PER_TOKEN),
//                                                                         kNvfp4 (NVFP4)
//
// A configuration the engine cannot honour (another method, bits, scheme, a field that changes
// the numbers and is not implemented) is an InvalidArgument naming the file, the field and the
// method: a quantized checkpoint never loads as something else.
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/definition.h"

namespace pagoda {

/// One rule of a quantization config: the projections it targets get `format` with `params`.
struct QuantScheme {
  WeightFormat format = WeightFormat::kDense;
  QuantParams params;
  /// compressed-tensors targets: "Linear" (every projection), a module name, or "re:" + a regular
  /// expression matched from the start of the module name. Empty: every projection.
  std::vector<std::string> targets;
};

/// How a QuantConfig's ignore list matches a module name.
enum class IgnoreRule : uint8_t {
  kExactOrRegex,  // compressed-tensors' ignore, fp8's ignored_layers: a name or "re:" + a pattern
  kSubstring,     // AWQ's modules_to_not_convert: the entry occurs in the module name
  kModelOpt,      // ModelOpt's exclude_modules: a name, a substring or an fnmatch wildcard
};

/// The quantization of a checkpoint, resolved per projection by scheme_of().
struct QuantConfig {
  std::string method;                // vLLM's name; empty: unquantized
  std::string source;                // the file it came from, for messages
  std::vector<QuantScheme> schemes;  // first match wins
  /// Modules left dense: compressed-tensors' ignore (names or "re:" patterns, matched like
  /// targets), fp8's ignored_layers (names), AWQ's modules_to_not_convert (substrings), ModelOpt's
  /// exclude_modules (wildcards).
  std::vector<std::string> ignore;
  IgnoreRule ignore_rule = IgnoreRule::kExactOrRegex;
  bool lm_head_quantized = false;  // GPTQ's lm_head (others: by targets and ignore)
  /// The KV cache dtype the checkpoint's per-layer k/v scales are for (compressed-tensors'
  /// kv_cache_scheme, ModelOpt's kv_cache_quant_algo); nullopt when it declares none.
  std::optional<DType> kv_cache_dtype;
  /// Whether --kv-cache-dtype auto takes kv_cache_dtype (ModelOpt's kv_cache_quant_algo, as
  /// vLLM's resolve_kv_cache_dtype_string; compressed-tensors' kv_cache_scheme does not).
  bool kv_cache_dtype_for_auto = false;

  [[nodiscard]] bool quantized() const { return !method.empty(); }
  /// The scheme of a projection's checkpoint module ("model.layers.0.self_attn.q_proj",
  /// "lm_head"), or nullopt when it stays dense.
  [[nodiscard]] std::optional<QuantScheme> scheme_of(const std::string& module) const;
};

/// The quantization of `config` under --quantization `flag` ("" or "none": as the config says).
/// `dummy_weights`: a flag other than fp8 on a config without quantization_config takes
/// default_quant_config(flag). Throws InvalidArgument naming the file and the field, or the flag.
[[nodiscard]] QuantConfig read_quant_config(const ModelConfig& config, const std::string& flag,
                                            bool dummy_weights = false);

/// One quantization_config object (from `source`, for messages), its method from its fields.
[[nodiscard]] QuantConfig read_quant_config_json(const nlohmann::json& q,
                                                 const std::string& source);

/// The configuration most checkpoints of `method` carry (vLLM's names): gptq 4-bit group 128
/// symmetric, awq 4-bit group 128, compressed-tensors FP8_DYNAMIC (per-channel weights,
/// per-token activations, lm_head ignored), modelopt FP8, modelopt_fp4 NVFP4; null for others.
[[nodiscard]] nlohmann::json default_quant_config(const std::string& method);

/// Sets the format of every projection of `definition` (the sources of a fused projection must
/// agree, as vLLM requires); InvalidArgument naming the projection otherwise.
void apply_quant_config(const QuantConfig& quant, ModelDefinition& definition);

/// The method names --quantization accepts, for messages.
[[nodiscard]] std::string supported_quantization_methods();

}  // namespace pagoda
