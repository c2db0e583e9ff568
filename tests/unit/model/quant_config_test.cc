// quantization_config as vLLM reads it (model/quant/quant_config.h): the configs that real
// checkpoints carry (llm-compressor, AutoGPTQ, GPTQModel, AutoAWQ, ModelOpt, vLLM's fp8) become
// the formats of the definition's projections; --quantization is checked against them; every
// configuration the engine cannot honour is an error naming the file, the field and the method.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/config.h"
#include "model/quant/quant_config.h"
#include "model/registry.h"
#include "test_checkpoint.h"

namespace pagoda {
namespace {

using nlohmann::json;

json tiny_llama() {
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"vocab_size", 64},
              {"hidden_size", 128},
              {"intermediate_size", 256},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-6},
              {"tie_word_embeddings", false}};
}

ModelConfig with_quant(const json& q) {
  json c = tiny_llama();
  c["quantization_config"] = q;
  return parse_model_config(c.dump(), "config.json");
}

ModelDefinition define(const json& q, const std::string& flag = "") {
  return define_model(with_quant(q), DefinitionOptions{0, flag});
}

/// The message of the InvalidArgument that defining the model throws ("" when none).
std::string error_of(const json& q, const std::string& flag = "") {
  try {
    (void)define(q, flag);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

/// llm-compressor's args object, with the fields it writes (nulls included).
json ct_args(int bits, const std::string& type, const std::string& strategy, bool dynamic,
             json group_size = nullptr) {
  return json{{"actorder", nullptr},   {"block_structure", nullptr},
              {"dynamic", dynamic},    {"group_size", group_size},
              {"num_bits", bits},      {"observer", "minmax"},
              {"observer_kwargs", {}}, {"strategy", strategy},
              {"symmetric", true},     {"type", type}};
}

/// llm-compressor's quantization_config; compressed-tensors 0.10 and later also write empty
/// sparsity_config and transform_config objects, and null scale_dtype / zp_dtype.
json ct_config(const json& weights, const json& inputs, const std::string& format) {
  json group{{"targets", {"Linear"}}, {"weights", weights}, {"output_activations", nullptr}};
  group["input_activations"] = inputs;
  for (json* args : {&group["weights"], &group["input_activations"]}) {
    if (args->is_object()) (*args)["scale_dtype"] = (*args)["zp_dtype"] = nullptr;
  }
  return json{{"config_groups", {{"group_0", group}}},
              {"format", format},
              {"global_compression_ratio", 1.5},
              {"ignore", {"lm_head"}},
              {"kv_cache_scheme", nullptr},
              {"quant_method", "compressed-tensors"},
              {"quantization_status", "compressed"},
              {"sparsity_config", json::object()},
              {"transform_config", json::object()},
              {"version", "0.12.2"}};
}

json gptq_config(int bits, int group, bool desc_act, bool sym) {
  return json{{"bits", bits},
              {"group_size", group},
              {"damp_percent", 0.01},
              {"desc_act", desc_act},
              {"static_groups", false},
              {"sym", sym},
              {"true_sequential", true},
              {"model_file_base_name", "model"},
              {"quant_method", "gptq"},
              {"checkpoint_format", "gptq"}};
}

json awq_config() {
  return json{{"bits", 4},
              {"group_size", 128},
              {"modules_to_not_convert", nullptr},
              {"quant_method", "awq"},
              {"version", "gemm"},
              {"zero_point", true}};
}

TEST(QuantConfig, CompressedTensorsFp8Int8AndFp4Schemes) {
  // FP8_DYNAMIC: channel weights, dynamic per-token activations; lm_head ignored.
  ModelDefinition d = define(ct_config(ct_args(8, "float", "channel", false),
                                       ct_args(8, "float", "token", true), "float-quantized"));
  EXPECT_EQ(d.layers[0].qkv.format, WeightFormat::kFp8);
  EXPECT_EQ(d.layers[1].down.quant.weight_scales, ScaleStrategy::kChannel);
  EXPECT_EQ(d.layers[1].down.quant.activations, ActivationQuant::kDynamicToken);
  EXPECT_EQ(d.lm_head.format, WeightFormat::kDense);
  EXPECT_HAS(d.weight_summary(), "fp8 (compressed-tensors) 8-bit per-channel");
  // FP8 static: per-tensor weights and activations.
  d = define(ct_config(ct_args(8, "float", "tensor", false), ct_args(8, "float", "tensor", false),
                       "float-quantized"));
  EXPECT_EQ(d.layers[0].o.quant.weight_scales, ScaleStrategy::kTensor);
  EXPECT_EQ(d.layers[0].o.quant.activations, ActivationQuant::kStaticTensor);
  // FP8 weight-only (W8A16).
  d = define(ct_config(ct_args(8, "float", "channel", false), nullptr, "float-quantized"));
  EXPECT_EQ(d.layers[0].o.quant.activations, ActivationQuant::kNone);
  // Block FP8 with grouped dynamic activations.
  json w = ct_args(8, "float", "block", false);
  w["block_structure"] = {128, 128};
  d = define(ct_config(w, ct_args(8, "float", "group", true, 128), "float-quantized"));
  EXPECT_EQ(d.layers[0].gate_up.quant.weight_scales, ScaleStrategy::kBlock);
  EXPECT_EQ(d.layers[0].gate_up.quant.activations, ActivationQuant::kDynamicGroup);
  // INT8 W8A8.
  d = define(ct_config(ct_args(8, "int", "channel", false), ct_args(8, "int", "token", true),
                       "int-quantized"));
  EXPECT_EQ(d.layers[0].qkv.format, WeightFormat::kInt8);
  EXPECT_EQ(d.layers[0].qkv.quant.activations, ActivationQuant::kDynamicToken);
  // NVFP4 and MXFP4 weight-only.
  d = define(
      ct_config(ct_args(4, "float", "tensor_group", false, 16), nullptr, "nvfp4-pack-quantized"));
  EXPECT_EQ(d.layers[0].qkv.format, WeightFormat::kNvfp4);
  EXPECT_EQ(d.layers[0].qkv.quant.group_size, 16);
  d = define(ct_config(ct_args(4, "float", "group", false, 32), nullptr, "mxfp4-pack-quantized"));
  EXPECT_EQ(d.layers[0].down.format, WeightFormat::kMxfp4);
  // compressed-tensors 0.12 and later name the scales' dtype: the ones each format is read in.
  json q =
      ct_config(ct_args(4, "float", "tensor_group", false, 16), nullptr, "nvfp4-pack-quantized");
  q["config_groups"]["group_0"]["weights"]["scale_dtype"] = "torch.float8_e4m3fn";
  q["config_groups"]["group_0"]["weights"]["zp_dtype"] = "torch.float8_e4m3fn";
  EXPECT_EQ(define(q).layers[0].qkv.format, WeightFormat::kNvfp4);
  q = ct_config(ct_args(4, "float", "group", false, 32), nullptr, "mxfp4-pack-quantized");
  q["config_groups"]["group_0"]["weights"]["scale_dtype"] = "torch.uint8";
  EXPECT_EQ(define(q).layers[0].qkv.format, WeightFormat::kMxfp4);
  q = ct_config(ct_args(8, "float", "channel", false), ct_args(8, "float", "token", true),
                "float-quantized");
  q["config_groups"]["group_0"]["weights"]["scale_dtype"] = "torch.bfloat16";
  q["kv_cache_scheme"] = ct_args(8, "float", "tensor", false);
  q["kv_cache_scheme"]["scale_dtype"] = "torch.float32";
  EXPECT_EQ(define(q).layers[0].qkv.format, WeightFormat::kFp8);
}

TEST(QuantConfig, CompressedTensorsTargetsIgnoreAndKvCacheScheme) {
  json q = ct_config(ct_args(8, "float", "channel", false), ct_args(8, "float", "token", true),
                     "float-quantized");
  q["config_groups"]["group_0"]["targets"] = {"re:.*self_attn\\..*_proj$"};
  q["ignore"] = {"re:.*lm_head", "model.layers.1.self_attn.o_proj"};
  q["kv_cache_scheme"] = ct_args(8, "float", "tensor", false);
  const ModelDefinition d = define(q);
  EXPECT_EQ(d.layers[0].qkv.format, WeightFormat::kFp8);
  EXPECT_EQ(d.layers[0].o.format, WeightFormat::kFp8);
  EXPECT_EQ(d.layers[1].o.format, WeightFormat::kDense);        // ignored
  EXPECT_EQ(d.layers[0].gate_up.format, WeightFormat::kDense);  // not targeted
  EXPECT_EQ(d.checkpoint_kv_cache_dtype, DType::kF8E4M3);
  EXPECT_FALSE(d.auto_kv_cache_dtype);  // vLLM: kv_cache_scheme alone leaves auto as it is
  EXPECT_EQ(d.layers[1].attention.module, "model.layers.1.self_attn");
  const QuantConfig c = read_quant_config(with_quant(q), "");
  EXPECT_FALSE(c.scheme_of("lm_head"));
  EXPECT_TRUE(c.scheme_of("model.layers.7.self_attn.v_proj"));
  EXPECT_FALSE(c.scheme_of("model.layers.7.mlp.up_proj"));
}

TEST(QuantConfig, GptqAwqFp8AndModelOpt) {
  for (const int group : {32, 64, 128, -1}) {
    const ModelDefinition d = define(gptq_config(4, group, group == 128, group != 64));
    const QuantParams& p = d.layers[0].down.quant;
    EXPECT_EQ(d.layers[0].down.format, WeightFormat::kGptq);
    EXPECT_EQ(p.group_size, group == -1 ? 256 : group);  // down: in = intermediate
    EXPECT_EQ(d.layers[0].qkv.quant.group_size, group == -1 ? 128 : group);
    EXPECT_EQ(p.desc_act, group == 128);
    EXPECT_EQ(p.symmetric, group != 64);
    EXPECT_TRUE(p.gptq_zero_plus_one);
    EXPECT_EQ(d.lm_head.format, WeightFormat::kDense);
  }
  json g = gptq_config(8, 128, false, true);
  g["checkpoint_format"] = "gptq_v2";
  g["lm_head"] = true;
  ModelDefinition d = define(g, "gptq_marlin");
  EXPECT_EQ(d.layers[0].o.quant.bits, 8);
  EXPECT_FALSE(d.layers[0].o.quant.gptq_zero_plus_one);
  EXPECT_EQ(d.lm_head.format, WeightFormat::kGptq);

  json a = awq_config();
  a["modules_to_not_convert"] = {"mlp"};
  d = define(a, "awq_marlin");
  EXPECT_EQ(d.layers[0].qkv.format, WeightFormat::kAwq);
  EXPECT_EQ(d.layers[0].qkv.quant.group_size, 128);
  EXPECT_EQ(d.layers[0].down.format, WeightFormat::kDense);  // "mlp" is a substring

  d = define(json{{"quant_method", "fp8"},
                  {"activation_scheme", "dynamic"},
                  {"fmt", "e4m3"},
                  {"weight_block_size", {128, 128}}});
  EXPECT_EQ(d.layers[0].qkv.quant.weight_scales, ScaleStrategy::kBlock);
  EXPECT_EQ(d.layers[0].qkv.quant.block_out, 128);

  const json nvfp4{{"quant_method", "modelopt"},
                   {"quant_algo", "NVFP4"},
                   {"group_size", 16},
                   {"kv_cache_quant_algo", "FP8"},
                   {"ignore", {"lm_head", "model.layers.1.mlp*"}}};
  d = define(nvfp4);
  EXPECT_EQ(d.layers[0].gate_up.format, WeightFormat::kNvfp4);
  EXPECT_EQ(d.layers[0].gate_up.quant.method, "modelopt_fp4");
  EXPECT_EQ(d.layers[1].gate_up.format, WeightFormat::kDense);  // wildcard
  EXPECT_EQ(d.layers[1].qkv.format, WeightFormat::kNvfp4);
  EXPECT_EQ(d.checkpoint_kv_cache_dtype, DType::kF8E4M3);
  EXPECT_EQ(d.auto_kv_cache_dtype, DType::kF8E4M3);  // vLLM: --kv-cache-dtype auto becomes fp8
  EXPECT_NO_THROW((void)define(nvfp4, "modelopt_fp4"));
  EXPECT_NO_THROW((void)define(nvfp4, "modelopt"));
  d = define(json{{"quant_method", "modelopt"}, {"quant_algo", "FP8"}});
  EXPECT_EQ(d.layers[0].qkv.format, WeightFormat::kFp8);
  EXPECT_EQ(d.layers[0].qkv.quant.activations, ActivationQuant::kStaticTensor);
  EXPECT_EQ(d.lm_head.format, WeightFormat::kDense);  // vLLM's lm_head is no LinearBase
}

TEST(QuantConfig, SideFilesAndFp8Online) {
  testing::TempDir dir;
  json c = tiny_llama();
  testing::write_file(dir.path() / "config.json", c.dump());
  testing::write_file(dir.path() / "quantize_config.json", gptq_config(4, 128, true, true).dump());
  ModelConfig config = load_model_config(dir.str());
  EXPECT_HAS(config.quantization_source, "quantize_config.json");
  EXPECT_EQ(define_model(config).layers[0].o.format, WeightFormat::kGptq);

  testing::TempDir mo;
  testing::write_file(mo.path() / "config.json", c.dump());
  testing::write_file(mo.path() / "hf_quant_config.json",
                      json{{"producer", {{"name", "modelopt"}, {"version", "0.29.0"}}},
                           {"quantization",
                            {{"quant_algo", "NVFP4"},
                             {"group_size", 16},
                             {"kv_cache_quant_algo", nullptr},
                             {"exclude_modules", {"lm_head"}}}}}
                          .dump());
  config = load_model_config(mo.str());
  EXPECT_EQ(define_model(config).layers[0].o.format, WeightFormat::kNvfp4);

  // --quantization fp8 on a float checkpoint: per-channel weights quantized at load.
  const ModelDefinition d =
      define_model(parse_model_config(c.dump(), "config.json"), DefinitionOptions{0, "fp8"});
  EXPECT_EQ(d.layers[0].qkv.format, WeightFormat::kFp8Online);
  EXPECT_EQ(d.layers[0].qkv.quant.weight_scales, ScaleStrategy::kChannel);
  EXPECT_EQ(d.layers[0].qkv.quant.activations, ActivationQuant::kDynamicToken);
  EXPECT_EQ(d.lm_head.format, WeightFormat::kDense);
  EXPECT_FALSE(
      define_model(parse_model_config(c.dump(), "config.json"), DefinitionOptions{0, "none"})
          .quantized());
}

TEST(QuantConfig, WhatCannotBeHonouredIsAnErrorNamingTheMethod) {
  EXPECT_HAS(error_of(json{{"quant_method", "bitsandbytes"}}),
             "config.json (quantization_config): field 'quant_method': 'bitsandbytes' is not "
             "supported");
  EXPECT_HAS(error_of(json{{"bits", 4}}), "field 'quant_method' is missing");
  EXPECT_HAS(error_of(gptq_config(3, 128, false, true)), "field 'bits' is 3: gptq is supported");
  json g = gptq_config(4, 128, false, true);
  g["checkpoint_format"] = "marlin";
  EXPECT_HAS(error_of(g), "field 'checkpoint_format' 'marlin' is not supported");
  g = gptq_config(4, 0, false, true);
  EXPECT_HAS(error_of(g), "field 'group_size' must be -1");
  json a = awq_config();
  a["version"] = "gemv";
  EXPECT_HAS(error_of(a), "field 'version' 'gemv' is not supported");
  // compressed-tensors W4A16 int (pack-quantized) and NVFP4 W4A4 are not implemented.
  std::string e =
      error_of(ct_config(ct_args(4, "int", "group", false, 128), nullptr, "pack-quantized"));
  EXPECT_HAS(e, "compressed-tensors scheme not supported");
  EXPECT_HAS(e, "weights int 4-bit group (group size 128) static");
  e = error_of(ct_config(ct_args(4, "float", "tensor_group", false, 16),
                         ct_args(4, "float", "tensor_group", true, 16), "nvfp4-pack-quantized"));
  EXPECT_HAS(e, "FP4 activations (W4A4)");
  // Scales in a dtype the format is not read in.
  json odd =
      ct_config(ct_args(4, "float", "tensor_group", false, 16), nullptr, "nvfp4-pack-quantized");
  odd["config_groups"]["group_0"]["weights"]["scale_dtype"] = "torch.bfloat16";
  EXPECT_HAS(error_of(odd), "weight scale_dtype bfloat16");
  odd = ct_config(ct_args(8, "int", "channel", false), ct_args(8, "int", "token", true),
                  "int-quantized");
  odd["config_groups"]["group_0"]["weights"]["scale_dtype"] = "torch.float8_e4m3fn";
  EXPECT_HAS(error_of(odd), "weight scale_dtype float8_e4m3fn");
  odd = ct_config(ct_args(8, "float", "channel", false), nullptr, "float-quantized");
  odd["kv_cache_scheme"] = ct_args(8, "float", "tensor", false);
  odd["kv_cache_scheme"]["scale_dtype"] = "torch.float8_e4m3fn";
  EXPECT_HAS(error_of(odd), "scale_dtype float8_e4m3fn: only static per-tensor FP8");
  // A transform_config that asks for rotations (an empty one asks for nothing).
  json rotated = ct_config(ct_args(8, "float", "channel", false), nullptr, "float-quantized");
  rotated["transform_config"] = {{"config_groups", {{"R1", {{"type", "hadamard"}}}}}};
  EXPECT_HAS(error_of(rotated), "field 'transform_config' (rotations) is not supported");
  json q = ct_config(ct_args(8, "float", "channel", false), nullptr, "float-quantized");
  q["kv_cache_scheme"] = ct_args(8, "int", "tensor", false);
  EXPECT_HAS(error_of(q), "field 'kv_cache_scheme' is int 8-bit tensor static");
  // Parts of a fused projection quantized differently.
  q["kv_cache_scheme"] = nullptr;
  q["ignore"] = {"model.layers.0.self_attn.k_proj"};
  EXPECT_HAS(error_of(q),
             "model.layers.0.self_attn.q_proj and model.layers.0.self_attn.k_proj "
             "are quantized differently");
  // The flag against the checkpoint.
  EXPECT_HAS(error_of(gptq_config(4, 128, false, true), "awq"),
             "--quantization awq: the checkpoint is quantized with 'gptq'");
  EXPECT_HAS(error_of(json{{"quant_method", "modelopt"}, {"quant_algo", "W4A8_AWQ"}}),
             "field 'quant_algo' 'W4A8_AWQ' is not supported");
  try {
    (void)define_model(parse_model_config(tiny_llama().dump(), "config.json"),
                       DefinitionOptions{0, "gptq"});
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& err) {
    EXPECT_HAS(err.what(), "--quantization gptq: config.json has no quantization_config");
  }
  try {
    (void)define_model(parse_model_config(tiny_llama().dump(), "config.json"),
                       DefinitionOptions{0, "bitsandbytes"});
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& err) {
    EXPECT_HAS(err.what(), "--quantization bitsandbytes: not supported (supported: fp8");
  }
}

}  // namespace
}  // namespace pagoda
