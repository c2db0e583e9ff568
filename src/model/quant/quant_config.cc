// How it works: read_quant_config names the method (the flag, else quantization_config's
// quant_method), then one parser per method turns its fields into QuantSchemes. Fields that only
// steer calibration (damp_percent, observer, ...) are skipped by name; every field that changes
// how the stored numbers are read is either implemented or refused. apply_quant_config then asks
// scheme_of() for each source of each projection, as vLLM asks its QuantizationConfig per layer
// prefix.
#include "model/quant/quant_config.h"

#include <fnmatch.h>

#include <algorithm>
#include <initializer_list>
#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/config_reader.h"

namespace pagoda {
namespace {

using nlohmann::json;

constexpr const char* kMethods =
    "fp8, compressed-tensors, gptq (gptq_marlin), awq (awq_marlin), modelopt, modelopt_fp4";

/// --quantization's names, canonical (after canonical_method).
bool known_method(const std::string& m) {
  return m == "fp8" || m == "compressed-tensors" || m == "gptq" || m == "awq" || m == "modelopt" ||
         m == "modelopt_fp4";
}

/// --quantization's aliases: vLLM's kernel-specific names of one checkpoint format.
std::string canonical_method(std::string m) {
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return std::tolower(c); });
  if (m == "gptq_marlin") return "gptq";
  if (m == "awq_marlin") return "awq";
  if (m == "compressed_tensors") return "compressed-tensors";
  return m;
}

/// compressed-tensors' targets and ignore entries: "Linear", a module name or "re:" + a pattern.
bool matches(const std::string& pattern, const std::string& module) {
  if (pattern == "Linear") return true;
  if (pattern.rfind("re:", 0) == 0) {
    // Python's re.match: anchored at the start, not at the end.
    return std::regex_search(module, std::regex(pattern.substr(3)),
                             std::regex_constants::match_continuous);
  }
  return pattern == module;
}

std::vector<std::string> string_list(const json& q, const ConfigReader& r, const char* key) {
  std::vector<std::string> out;
  if (!r.has(key)) return out;
  const json& v = q.at(key);
  if (!v.is_array()) r.fail(key, "must be a list of strings");
  for (const json& x : v) {
    if (!x.is_string()) r.fail(key, "must be a list of strings");
    out.push_back(x.get<std::string>());
  }
  return out;
}

// ---- gptq ------------------------------------------------------------------------------------

QuantConfig parse_gptq(const json& q, const std::string& src) {
  const ConfigReader r(q, src);
  QuantScheme s;
  s.format = WeightFormat::kGptq;
  QuantParams& p = s.params;
  p.method = "gptq";
  p.bits = static_cast<int>(r.required_int("bits"));
  if (p.bits != 4 && p.bits != 8)
    r.fail("bits", fmt::format("is {}: gptq is supported with 4 or 8 bits", p.bits));
  p.weight_scales = ScaleStrategy::kGroup;
  p.group_size = r.optional_int("group_size", -1, -1);
  if (p.group_size == 0) r.fail("group_size", "must be -1 (per channel) or positive");
  p.desc_act = r.optional_bool("desc_act", false);
  p.symmetric = r.optional_bool("sym", true);
  // AutoGPTQ and GPTQModel save "gptq" (v1: a stored zero point is the zero point - 1) unless
  // asked for "gptq_v2" (the zero point itself); vLLM's gptq_gemm reads both (use_v2_format).
  const std::string format = r.has("checkpoint_format")
                                 ? r.optional_string("checkpoint_format", "gptq")
                                 : r.optional_string("format", "gptq");
  if (format != "gptq" && format != "gptq_v2") {
    r.fail(r.has("checkpoint_format") ? "checkpoint_format" : "format",
           fmt::format("'{}' is not supported (gptq, gptq_v2)", format));
  }
  p.gptq_zero_plus_one = format == "gptq";
  if (r.optional_bool("is_marlin_format", false))
    r.fail("is_marlin_format", "true (a Marlin-repacked checkpoint) is not supported");
  if (r.has("dynamic") && !(q.at("dynamic").is_object() && q.at("dynamic").empty()))
    r.fail("dynamic", "(per-module overrides) is not supported");
  if (r.optional_string("pack_dtype", "int32") != "int32")
    r.fail("pack_dtype", "must be int32 (the packing vLLM reads)");
  QuantConfig c;
  c.method = "gptq";
  c.source = src;
  c.lm_head_quantized = r.optional_bool("lm_head", false);
  c.schemes.push_back(std::move(s));
  return c;
}

// ---- awq -------------------------------------------------------------------------------------

QuantConfig parse_awq(const json& q, const std::string& src) {
  const ConfigReader r(q, src);
  QuantScheme s;
  s.format = WeightFormat::kAwq;
  QuantParams& p = s.params;
  p.method = "awq";
  const char* bits_key = r.has("bits") ? "bits" : "w_bit";
  p.bits = static_cast<int>(r.required_int(bits_key));
  if (p.bits != 4) r.fail(bits_key, fmt::format("is {}: awq is supported with 4 bits", p.bits));
  const char* group_key = r.has("group_size") ? "group_size" : "q_group_size";
  p.weight_scales = ScaleStrategy::kGroup;
  p.group_size = r.required_int(group_key, 1);
  p.symmetric = false;
  if (!r.optional_bool("zero_point", true))
    r.fail("zero_point", "false is not supported (AutoAWQ GEMM checkpoints have zero points)");
  std::string version = r.optional_string("version", "gemm");
  std::transform(version.begin(), version.end(), version.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  if (version != "gemm")
    r.fail("version", fmt::format("'{}' is not supported (gemm: AutoAWQ's GEMM packing)", version));
  QuantConfig c;
  c.method = "awq";
  c.source = src;
  c.ignore = string_list(q, r, "modules_to_not_convert");
  c.ignore_rule = IgnoreRule::kSubstring;
  c.schemes.push_back(std::move(s));
  return c;
}

// ---- fp8 (serialized) ------------------------------------------------------------------------

QuantConfig parse_fp8(const json& q, const std::string& src) {
  const ConfigReader r(q, src);
  QuantScheme s;
  s.format = WeightFormat::kFp8;
  QuantParams& p = s.params;
  p.method = "fp8";
  p.bits = 8;
  if (r.optional_string("fmt", "e4m3") != "e4m3")
    r.fail("fmt", "must be e4m3 (float8_e4m3fn weights)");
  const std::string act = r.optional_string("activation_scheme", "dynamic");
  if (act != "static" && act != "dynamic")
    r.fail("activation_scheme", fmt::format("'{}' must be static or dynamic", act));
  p.activations = act == "static" ? ActivationQuant::kStaticTensor : ActivationQuant::kDynamicToken;
  p.weight_scales = ScaleStrategy::kTensor;
  if (r.has("weight_block_size")) {
    const json& b = q.at("weight_block_size");
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0)
      r.fail("weight_block_size", "must be [block_out, block_in], both positive");
    if (act != "dynamic") r.fail("activation_scheme", "must be dynamic with weight_block_size");
    p.weight_scales = ScaleStrategy::kBlock;
    p.block_out = b[0].get<int64_t>();
    p.block_in = b[1].get<int64_t>();
    p.activations = ActivationQuant::kDynamicGroup;
  }
  QuantConfig c;
  c.method = "fp8";
  c.source = src;
  c.ignore =
      string_list(q, r, r.has("ignored_layers") ? "ignored_layers" : "modules_to_not_convert");
  c.schemes.push_back(std::move(s));
  return c;
}

// ---- compressed-tensors ----------------------------------------------------------------------

/// One QuantizationArgs object (weights or input_activations).
struct Args {
  int bits = 0;
  std::string type;  // int, float
  bool symmetric = true;
  std::string strategy;  // tensor, channel, group, block, token, tensor_group
  int64_t group_size = 0;
  std::vector<int64_t> block;
  std::string dynamic;  // "true", "false", "local"
  /// scale_dtype without "torch.": compressed-tensors 0.12 and later name the dtype of the scales
  /// they wrote ("float8_e4m3fn" for NVFP4, "uint8" for MXFP4); empty when null or absent.
  std::string scale_dtype;
};

Args parse_args(const json& a, const std::string& src) {
  const ConfigReader r(a, src);
  if (!a.is_object()) r.fail("", "must be an object");
  Args out;
  out.bits = static_cast<int>(r.required_int("num_bits"));
  out.type = r.optional_string("type", "int");
  out.symmetric = r.optional_bool("symmetric", true);
  out.strategy = r.optional_string("strategy", "tensor");
  out.group_size = r.optional_int("group_size", 0, -1);
  if (r.has("block_structure")) {
    for (const json& x : a.at("block_structure")) {
      if (!x.is_number_integer() || x.get<int64_t>() <= 0)
        r.fail("block_structure", "must be [block_out, block_in], both positive");
      out.block.push_back(x.get<int64_t>());
    }
    if (out.block.size() != 2) r.fail("block_structure", "must be [block_out, block_in]");
  }
  if (!r.has("dynamic")) {
    out.dynamic = "false";
  } else if (a.at("dynamic").is_boolean()) {
    out.dynamic = a.at("dynamic").get<bool>() ? "true" : "false";
  } else {
    out.dynamic = r.optional_string("dynamic", "false");
  }
  if (r.has("actorder") && out.type != "int") r.fail("actorder", "applies to int weights only");
  out.scale_dtype = r.optional_string("scale_dtype", "");
  if (out.scale_dtype.rfind("torch.", 0) == 0) out.scale_dtype = out.scale_dtype.substr(6);
  // zp_dtype names the dtype of zero points; the schemes read here are symmetric (asymmetric ones
  // are refused below), so it describes nothing that is loaded.
  (void)r.optional_string("zp_dtype", "");
  return out;
}

std::string describe(const Args& a) {
  std::string d = fmt::format("{} {}-bit {}", a.type, a.bits, a.strategy);
  if (a.group_size > 0) d += fmt::format(" (group size {})", a.group_size);
  d += a.dynamic == "false" ? " static" : " dynamic";
  if (!a.symmetric) d += " asymmetric";
  if (!a.scale_dtype.empty()) d += ", scale_dtype " + a.scale_dtype;
  return d;
}

QuantScheme ct_scheme(const json& group, const std::string& top_format, const std::string& src) {
  const ConfigReader r(group, src);
  if (!r.has("weights")) r.fail("weights", "is missing");
  const Args w = parse_args(group.at("weights"), src + ".weights");
  std::optional<Args> in;
  if (r.has("input_activations"))
    in = parse_args(group.at("input_activations"), src + ".input_activations");
  if (r.has("output_activations")) r.fail("output_activations", "are not supported");
  const std::string format = r.optional_string("format", top_format);
  QuantScheme s;
  s.targets = string_list(group, r, "targets");
  QuantParams& p = s.params;
  p.method = "compressed-tensors";
  p.bits = w.bits;
  p.symmetric = w.symmetric;
  const std::string what = fmt::format("{}: weights {}{}, format {}", src, describe(w),
                                       in ? ", input activations " + describe(*in) : "", format);
  auto refuse = [&](const std::string& why) {
    throw InvalidArgument(
        fmt::format("{}: compressed-tensors scheme not supported: {} (supported: "
                    "FP8 W8A8 / W8A16, INT8 W8A8, NVFP4 and MXFP4 W4A16)",
                    what, why));
  };
  if (w.dynamic != "false") refuse("dynamic weight scales");
  // The scale dtypes the format's tensors are read in (model/quant/*_methods.cc): fp32, bf16 or
  // f16 for 8-bit weights and every activation scale, float8_e4m3fn for NVFP4's block scales,
  // e8m0 bits in uint8 for MXFP4's.
  auto check_scale_dtype = [&](const Args& a, const char* what,
                               std::initializer_list<const char*> allowed) {
    if (a.scale_dtype.empty()) return;
    for (const char* d : allowed)
      if (a.scale_dtype == d) return;
    refuse(fmt::format("{} scale_dtype {}", what, a.scale_dtype));
  };
  const std::initializer_list<const char*> float_dtypes = {"float32", "bfloat16", "float16"};
  if (!(w.type == "float" && w.bits == 4)) {
    check_scale_dtype(w, "weight", float_dtypes);
  } else if (w.group_size == 16) {
    check_scale_dtype(w, "weight", {"float8_e4m3fn"});
  } else {
    check_scale_dtype(w, "weight", {"uint8", "float8_e8m0fnu"});
  }
  if (in && in->bits == 8) check_scale_dtype(*in, "input activation", float_dtypes);
  if (w.type == "float" && w.bits == 8) {
    if (format != "float-quantized" && format != "naive-quantized")
      refuse("FP8 weights are stored float-quantized");
    if (!w.symmetric) refuse("asymmetric FP8 weights");
    s.format = WeightFormat::kFp8;
    if (w.strategy == "tensor") {
      p.weight_scales = ScaleStrategy::kTensor;
    } else if (w.strategy == "channel") {
      p.weight_scales = ScaleStrategy::kChannel;
    } else if (w.strategy == "block" && w.block.size() == 2) {
      p.weight_scales = ScaleStrategy::kBlock;
      p.block_out = w.block[0];
      p.block_in = w.block[1];
    } else {
      refuse("FP8 weight scales are per tensor, channel or block");
    }
    if (!in) return s;
    if (in->type != "float" || in->bits != 8 || !in->symmetric)
      refuse("FP8 weights take symmetric FP8 activations");
    if (in->dynamic == "true") {
      const bool group = in->strategy == "group";
      if (p.weight_scales == ScaleStrategy::kBlock) {
        if (!group || in->group_size != p.block_in)
          refuse("block FP8 weights take activations grouped by block_in");
        p.activations = ActivationQuant::kDynamicGroup;
      } else {
        if (group) refuse("grouped FP8 activations need block weights");
        p.activations = ActivationQuant::kDynamicToken;  // vLLM: per token, tensor or token
      }
    } else if (in->dynamic == "false" && in->strategy == "tensor") {
      if (p.weight_scales == ScaleStrategy::kBlock) refuse("block FP8 weights need dynamic inputs");
      p.activations = ActivationQuant::kStaticTensor;
    } else {
      refuse("FP8 activations are static per tensor or dynamic");
    }
    return s;
  }
  if (w.type == "int" && w.bits == 8 && in) {
    if (format != "int-quantized" && format != "naive-quantized")
      refuse("INT8 W8A8 weights are stored int-quantized");
    if (!w.symmetric) refuse("asymmetric INT8 weights");
    if (w.strategy != "tensor" && w.strategy != "channel")
      refuse("INT8 weight scales are per tensor or channel");
    if (in->type != "int" || in->bits != 8) refuse("INT8 weights take INT8 activations");
    if (!in->symmetric) refuse("asymmetric INT8 activations (azp)");
    s.format = WeightFormat::kInt8;
    p.weight_scales = w.strategy == "tensor" ? ScaleStrategy::kTensor : ScaleStrategy::kChannel;
    if (in->dynamic == "true") {
      p.activations = ActivationQuant::kDynamicToken;
    } else if (in->dynamic == "false" && in->strategy == "tensor") {
      p.activations = ActivationQuant::kStaticTensor;
    } else {
      refuse("INT8 activations are static per tensor or dynamic per token");
    }
    return s;
  }
  if (w.type == "float" && w.bits == 4) {
    const bool nv = w.group_size == 16 && format == "nvfp4-pack-quantized";
    const bool mx = w.group_size == 32 && format == "mxfp4-pack-quantized";
    if (!nv && !mx) refuse("FP4 weights are NVFP4 (group 16) or MXFP4 (group 32), pack-quantized");
    if (in) refuse("FP4 activations (W4A4): only the weight-only W4A16 schemes are implemented");
    if (!w.symmetric) refuse("asymmetric FP4 weights");
    s.format = nv ? WeightFormat::kNvfp4 : WeightFormat::kMxfp4;
    p.weight_scales = ScaleStrategy::kGroup;
    p.group_size = w.group_size;
    return s;
  }
  refuse("no implemented scheme matches");
  return s;
}

QuantConfig parse_compressed_tensors(const json& q, const std::string& src) {
  const ConfigReader r(q, src);
  const std::string status = r.optional_string("quantization_status", "compressed");
  if (status != "compressed")
    r.fail("quantization_status", fmt::format("'{}': only compressed checkpoints load", status));
  if (r.has("sparsity_config") && !q.at("sparsity_config").empty()) {
    const json& sp = q.at("sparsity_config");
    const std::string f = sp.is_object() && sp.contains("format") && sp.at("format").is_string()
                              ? sp.at("format").get<std::string>()
                              : "";
    if (f != "dense") r.fail("sparsity_config", "(sparse weights) is not supported");
  }
  // compressed-tensors 0.10 and later write "transform_config": {} (and "sparsity_config": {})
  // into every checkpoint; only a non-empty one asks for something (rotations).
  if (r.has("transform_config") && !q.at("transform_config").empty())
    r.fail("transform_config", "(rotations) is not supported");
  if (!r.has("config_groups") || !q.at("config_groups").is_object())
    r.fail("config_groups", "is missing or not an object");
  const std::string format = r.optional_string("format", "");
  QuantConfig c;
  c.method = "compressed-tensors";
  c.source = src;
  for (const auto& [name, group] : q.at("config_groups").items())
    c.schemes.push_back(ct_scheme(group, format, src + ": config_groups." + name));
  c.ignore = string_list(q, r, "ignore");
  if (r.has("kv_cache_scheme")) {
    // llm-compressor's FP8 KV cache: one static scale per layer for K and one for V
    // (self_attn.k_scale / v_scale); vLLM reads no other kind.
    const Args kv = parse_args(q.at("kv_cache_scheme"), src + ".kv_cache_scheme");
    const bool float_scales = kv.scale_dtype.empty() || kv.scale_dtype == "float32" ||
                              kv.scale_dtype == "bfloat16" || kv.scale_dtype == "float16";
    if (kv.type != "float" || kv.bits != 8 || kv.strategy != "tensor" || kv.dynamic != "false" ||
        !kv.symmetric || !float_scales) {
      r.fail("kv_cache_scheme", fmt::format("is {}: only static per-tensor FP8 (float 8-bit) is "
                                            "supported",
                                            describe(kv)));
    }
    c.kv_cache_dtype = DType::kF8E4M3;
  }
  return c;
}

// ---- modelopt (NVIDIA TensorRT Model Optimizer) ----------------------------------------------

/// Both spellings vLLM reads: config.json's flat {"quant_method": "modelopt", "quant_algo": ...,
/// "ignore": [...]}, and hf_quant_config.json's {"producer": ..., "quantization": {"quant_algo":
/// ..., "exclude_modules": [...], "kv_cache_quant_algo": ...}}.
QuantConfig parse_modelopt(const json& top, const std::string& top_src) {
  const bool nested = top.contains("quantization");
  const json& q = nested ? top.at("quantization") : top;
  const std::string src = nested ? top_src + ": quantization" : top_src;
  const ConfigReader r(q, src);
  if (!q.is_object()) r.fail("", "must be an object");
  std::string algo = r.optional_string("quant_algo", "");
  std::transform(algo.begin(), algo.end(), algo.begin(),
                 [](unsigned char ch) { return std::toupper(ch); });
  QuantScheme s;
  QuantParams& p = s.params;
  p.bits = 8;
  if (algo == "FP8") {
    // weight fp8 [rows, in], weight_scale and input_scale per tensor.
    s.format = WeightFormat::kFp8;
    p.method = "modelopt";
    p.weight_scales = ScaleStrategy::kTensor;
    p.activations = ActivationQuant::kStaticTensor;
  } else if (algo == "FP8_PER_CHANNEL_PER_TOKEN") {
    s.format = WeightFormat::kFp8;
    p.method = "modelopt";
    p.weight_scales = ScaleStrategy::kChannel;
    p.activations = ActivationQuant::kDynamicToken;
  } else if (algo == "NVFP4") {
    // weight uint8 [rows, in / 2], weight_scale fp8 [rows, in / 16], weight_scale_2 and
    // input_scale per tensor. The activations' FP4 quantization (W4A4) needs Blackwell; the CPU
    // and Hopper run it weight-only (W4A16), as vLLM's Marlin fallback does.
    s.format = WeightFormat::kNvfp4;
    p.method = "modelopt_fp4";
    p.bits = 4;
    p.weight_scales = ScaleStrategy::kGroup;
    p.group_size = r.optional_int("group_size", 16, 1);
    if (p.group_size != 16) r.fail("group_size", "must be 16 for NVFP4");
  } else {
    r.fail("quant_algo",
           fmt::format("'{}' is not supported (FP8, FP8_PER_CHANNEL_PER_TOKEN, NVFP4)", algo));
  }
  QuantConfig c;
  c.method = p.method;
  c.source = top_src;
  c.ignore = string_list(q, r, nested ? "exclude_modules" : "ignore");
  c.ignore_rule = IgnoreRule::kModelOpt;
  const std::string kv = r.optional_string("kv_cache_quant_algo", "");
  if (!kv.empty()) {
    if (kv != "FP8" && kv != "fp8")
      r.fail("kv_cache_quant_algo", fmt::format("'{}' is not supported (FP8)", kv));
    c.kv_cache_dtype = DType::kF8E4M3;
    c.kv_cache_dtype_for_auto = true;
  }
  c.schemes.push_back(std::move(s));
  return c;
}

/// Whether the module is excluded by a ModelOpt pattern: the name itself, a substring of it, or
/// an fnmatch wildcard ("model.layers.0.*", "*lm_head*"), as vLLM's is_layer_excluded.
bool modelopt_excluded(const std::string& pattern, const std::string& module) {
  return pattern == module || module.find(pattern) != std::string::npos ||
         fnmatch(pattern.c_str(), module.c_str(), 0) == 0;
}

/// The method a quantization_config declares, by vLLM's names: quant_method, with ModelOpt's
/// "modelopt" resolved to "modelopt_fp4" for FP4 algorithms (override_quantization_method), and
/// hf_quant_config.json (no quant_method, a "quantization" object) read as ModelOpt.
std::string declared_method(const json& q, const std::string& src) {
  const ConfigReader r(q, src);
  if (!r.has("quant_method")) {
    if (q.contains("quantization") && q.at("quantization").is_object()) return "modelopt";
    r.fail("quant_method", "is missing");
  }
  const std::string m = canonical_method(r.optional_string("quant_method", ""));
  if (m != "modelopt") return m;
  const json& inner =
      q.contains("quantization") && q.at("quantization").is_object() ? q.at("quantization") : q;
  const auto algo = inner.contains("quant_algo") && inner.at("quant_algo").is_string()
                        ? inner.at("quant_algo").get<std::string>()
                        : std::string();
  return algo.find("FP4") != std::string::npos || algo.find("fp4") != std::string::npos
             ? "modelopt_fp4"
             : "modelopt";
}

}  // namespace

std::optional<QuantScheme> QuantConfig::scheme_of(const std::string& module) const {
  if (!quantized()) return std::nullopt;
  for (const std::string& pattern : ignore) {
    bool hit = false;
    switch (ignore_rule) {
      case IgnoreRule::kExactOrRegex:
        hit = matches(pattern, module);
        break;
      case IgnoreRule::kSubstring:
        hit = module.find(pattern) != std::string::npos;
        break;
      case IgnoreRule::kModelOpt:
        hit = modelopt_excluded(pattern, module);
        break;
    }
    if (hit) return std::nullopt;
  }
  const bool is_head = module == "lm_head";
  // vLLM's lm_head (ParallelLMHead) is no LinearBase: fp8, AWQ and ModelOpt leave it dense, GPTQ
  // quantizes it when the config says so (lm_head: true); compressed-tensors decides by its
  // targets and ignore list.
  if (is_head && method != "compressed-tensors" && !lm_head_quantized) return std::nullopt;
  for (const QuantScheme& s : schemes) {
    if (s.targets.empty() || std::any_of(s.targets.begin(), s.targets.end(),
                                         [&](const std::string& t) { return matches(t, module); }))
      return s;
  }
  return std::nullopt;
}

std::string supported_quantization_methods() { return kMethods; }

nlohmann::json default_quant_config(const std::string& method) {
  // The configurations most checkpoints of each method carry.
  const json fp8_args{{"num_bits", 8}, {"type", "float"}, {"symmetric", true}};
  if (method == "gptq") {
    return {{"quant_method", "gptq"}, {"bits", 4},   {"group_size", 128},
            {"desc_act", false},      {"sym", true}, {"checkpoint_format", "gptq"}};
  }
  if (method == "awq") {
    return {{"quant_method", "awq"},
            {"bits", 4},
            {"group_size", 128},
            {"version", "gemm"},
            {"zero_point", true}};
  }
  if (method == "compressed-tensors") {  // llm-compressor's FP8_DYNAMIC
    json w = fp8_args, in = fp8_args;
    w["strategy"] = "channel";
    w["dynamic"] = false;
    in["strategy"] = "token";
    in["dynamic"] = true;
    return {{"quant_method", "compressed-tensors"},
            {"format", "float-quantized"},
            {"ignore", {"lm_head"}},
            {"config_groups",
             {{"group_0", {{"targets", {"Linear"}}, {"weights", w}, {"input_activations", in}}}}}};
  }
  if (method == "modelopt") return {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}};
  if (method == "modelopt_fp4") {
    return {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16}};
  }
  return nullptr;
}

QuantConfig read_quant_config(const ModelConfig& config, const std::string& flag_in,
                              bool dummy_weights) {
  const std::string flag =
      flag_in == "none" || flag_in == "None" ? std::string() : canonical_method(flag_in);
  if (!flag.empty() && !known_method(flag)) {
    throw InvalidArgument(
        fmt::format("--quantization {}: not supported (supported: {})", flag_in, kMethods));
  }
  std::string declared;
  if (config.quantization_config)
    declared = declared_method(*config.quantization_config, config.quantization_source);
  // vLLM takes --quantization modelopt for both ModelOpt configs.
  const bool same = flag == declared || (flag == "modelopt" && declared == "modelopt_fp4");
  if (!flag.empty() && !declared.empty() && !same) {
    throw InvalidArgument(fmt::format(
        "--quantization {}: the checkpoint is quantized with '{}' ({}); drop the flag or pass "
        "--quantization {}",
        flag_in, declared, config.quantization_source, declared));
  }
  const std::string method = declared.empty() ? flag : declared;
  if (method.empty()) return {};
  if (declared.empty() && dummy_weights && method != "fp8") {
    return read_quant_config_json(default_quant_config(method),
                                  fmt::format("--load-format dummy --quantization {}", flag_in));
  }
  if (declared.empty()) {
    if (method != "fp8") {
      throw InvalidArgument(fmt::format(
          "--quantization {}: {} has no quantization_config (nor quantize_config.json): only fp8 "
          "quantizes an unquantized checkpoint at load",
          flag_in, config.source));
    }
    // FP8 online: per-channel weights at load, dynamic per-token activations; lm_head dense.
    QuantConfig c;
    c.method = "fp8";
    c.source = "--quantization fp8";
    QuantScheme s;
    s.format = WeightFormat::kFp8Online;
    s.params.method = "fp8";
    s.params.bits = 8;
    s.params.weight_scales = ScaleStrategy::kChannel;
    s.params.activations = ActivationQuant::kDynamicToken;
    c.schemes.push_back(std::move(s));
    return c;
  }
  return read_quant_config_json(*config.quantization_config, config.quantization_source);
}

QuantConfig read_quant_config_json(const nlohmann::json& q, const std::string& src) {
  const std::string method = declared_method(q, src);
  if (method == "gptq") return parse_gptq(q, src);
  if (method == "awq") return parse_awq(q, src);
  if (method == "fp8") return parse_fp8(q, src);
  if (method == "compressed-tensors") return parse_compressed_tensors(q, src);
  if (method == "modelopt" || method == "modelopt_fp4") return parse_modelopt(q, src);
  throw InvalidArgument(fmt::format(
      "{}: field 'quant_method': '{}' is not supported (supported: {})", src, method, kMethods));
}

void apply_quant_config(const QuantConfig& quant, ModelDefinition& d) {
  if (!quant.quantized()) return;
  d.checkpoint_kv_cache_dtype = quant.kv_cache_dtype;
  if (quant.kv_cache_dtype_for_auto) d.auto_kv_cache_dtype = quant.kv_cache_dtype;
  auto apply = [&](LinearDef& l) {
    std::optional<QuantScheme> first;
    for (size_t i = 0; i < l.sources.size(); ++i) {
      const std::string& module = l.sources[i].prefix;
      std::optional<QuantScheme> s = quant.scheme_of(module);
      if (i == 0) {
        first = std::move(s);
        continue;
      }
      const bool same = s.has_value() == first.has_value() &&
                        (!s || (s->format == first->format && s->params == first->params));
      if (!same) {
        throw InvalidArgument(fmt::format(
            "{}: {} and {} are quantized differently ({}); the parts of a fused projection must "
            "share one scheme",
            quant.source, l.sources[0].prefix, module, l.name));
      }
    }
    if (!first) return;
    l.format = first->format;
    l.quant = first->params;
    if (l.quant.weight_scales == ScaleStrategy::kGroup && l.quant.group_size == -1)
      l.quant.group_size = l.in;  // GPTQ's per-channel: one group of every input feature
  };
  for (LayerDef& layer : d.layers) {
    for (LinearDef* l : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) apply(*l);
  }
  if (!d.lm_head_tied) apply(d.lm_head);
}

}  // namespace pagoda
