#pragma once
// The quantized checkpoints of tests/data/tiny-quant (tools/make_quant_fixtures.py, written on the
// device machine by bench/device/make_quant_fixtures.sh): one tiny Llama (hidden 128, head dim 64,
// 2 layers, vocab 512) per real layout, with transformers' outputs on its exactly dequantized
// weights (W8A8 activations and the FP8 KV cache emulated as vLLM quantizes them).
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "golden_check.h"
#include "model/model.h"

namespace pagoda::golden {

struct QuantFixture {
  const char* name;
  /// A substring of the definition's weight summary (ModelDefinition::weight_summary): the format
  /// config.json (or the side file) declares, as the engine read it.
  const char* summary;
  /// Whether activations (or the KV cache) are quantized: W8A8, whose bound is kW8A8.
  bool w8a8;
  /// Whether the GPU loads it (dense, FP8, INT8 W8A8, GPTQ / AWQ 4-bit projections); the others
  /// are refused by name.
  bool gpu;
  /// A refused fixture's reason when it is not the format (the error then holds this instead).
  const char* gpu_refusal = nullptr;
};

/// Max |log-probability - transformers'| on the CPU. Weight-only formats: 1e-3, as the dense tiny
/// goldens (the dequantized weights are exact, only the fp32 summation order differs).
inline constexpr double kWeightOnly = 1e-3;
/// W8A8 (and the FP8 KV cache): the emulation rounds the same fp32 values by the engine's rules.
/// But the fp32 summation orders differ by about an ulp, and an activation that this moves across
/// a rounding boundary changes by a whole step (1/16 of itself in e4m3, max|x| / 127 in int8).
/// Measured against the tool's emulation in a plain-torch Llama of these shapes (golden-format
/// prompts of 6 and 40 tokens, 24 steps, teacher-forced): FP8 static + KV cache 2.3e-6 (no flip),
/// FP8 dynamic 3.1e-2 (flips in decode), INT8 1.9e-2; 1-ulp noise before each quantization moved
/// top-10 log-probabilities of 48-token prompts by up to 0.12 (FP8) and 0.055 (INT8). 0.25 is twice
/// the largest. Skipping the activation quantization altogether moves them by about as much (0.25
/// FP8, 0.07 INT8), so the goldens hold the layouts and scales, the unit tests (quant_model_test,
/// quant_test) the activation rules.
inline constexpr double kW8A8 = 0.25;

inline const QuantFixture kQuantFixtures[] = {
    {"ct-fp8-dynamic",
     "fp8 (compressed-tensors) 8-bit per-channel, dynamic per-token activations (8 projections), "
     "lm_head dense",
     true, true},
    {"ct-fp8-static-kv",
     "fp8 (compressed-tensors) 8-bit per-tensor, static activations (8 projections), lm_head tied, "
     "KV cache scales for",
     true, true},
    {"ct-int8-dynamic",
     "int8 (compressed-tensors) 8-bit per-channel, dynamic per-token activations (8 projections)",
     true, true},
    {"gptq-g128-sym", "gptq 4-bit group 128 sym (8 projections)", false, true},
    {"gptq-g32-asym", "gptq 4-bit group 32 asym (8 projections)", false, true},
    // group_size -1: one group of all inputs, 128 or 256 (down_proj).
    {"gptq-channel", "gptq 4-bit group 128 sym (6 projections), gptq 4-bit group 256 sym (2", false,
     true},
    // Act-order: one random permutation per input, shared by q, k, v (and gate, up) as AutoGPTQ's
    // are (the same input, the same Hessian); the GPU applies it per fused projection.
    {"gptq-g64-desc-act", "gptq 4-bit group 64 sym act-order (8 projections)", false, true},
    {"gptq-8bit-sidefile", "gptq 8-bit group 128 asym (8 projections)", false, false},
    {"awq-g64", "awq 4-bit group 64 (8 projections)", false, true},
    {"modelopt-nvfp4", "nvfp4 (modelopt_fp4) 4-bit group 16 (8 projections)", false, false},
};

inline std::string quant_fixture_dir(const QuantFixture& f) {
  return kSource + "/tests/data/tiny-quant/" + f.name;
}

/// The load options of a quantized fixture: golden.json's "kv_cache_dtype" (the checkpoint's KV
/// scales are for it) as --kv-cache-dtype.
inline LoadOptions quant_load_options(const std::string& dir) {
  LoadOptions options = fixture_load_options(dir);
  const nlohmann::json golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  if (golden.contains("kv_cache_dtype"))
    options.kv_cache.dtype = golden.at("kv_cache_dtype").get<std::string>();
  return options;
}

/// How gtest prints a fixture parameter: its name.
inline void PrintTo(const QuantFixture& f, std::ostream* os) { *os << f.name; }

/// gtest's name of a fixture ("gptq-g32-asym" -> "gptq_g32_asym").
inline std::string quant_test_name(const QuantFixture& f) {
  std::string name = f.name;
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

}  // namespace pagoda::golden
