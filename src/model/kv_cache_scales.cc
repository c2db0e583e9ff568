#include "model/kv_cache_scales.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/half.h"
#include "core/status.h"
#include "kv/kv_cache_spec.h"

namespace pagoda {
namespace {

constexpr float kFp8KeyRange = 200.0f;    // vLLM's K_SCALE_CONSTANT
constexpr float kFp8ValueRange = 100.0f;  // vLLM's V_SCALE_CONSTANT
constexpr float kInt8Range = 127.0f;
constexpr float kE4M3Range = 448.0f;  // what checkpoint scales are calibrated for

/// The scalar tensor `name` as a float; InvalidArgument naming it unless it holds one positive
/// finite f32, bf16 or f16 value.
float read_scale(const WeightStore& weights, const std::string& name) {
  const Tensor& t = weights.get(name);
  float value = NAN;
  if (t.shape.num_elements() == 1) {
    switch (t.dtype) {
      case DType::kF32:
        value = t.as<float>()[0];
        break;
      case DType::kBF16:
        value = bf16_to_float(t.as<uint16_t>()[0]);
        break;
      case DType::kF16:
        value = f16_to_float(t.as<uint16_t>()[0]);
        break;
      default:
        break;
    }
  }
  if (!(std::isfinite(value) && value > 0)) {
    throw InvalidArgument(
        fmt::format("{}: tensor '{}' ({} {}) must be one positive finite float (a KV cache scale)",
                    weights.source_of(name), name, dtype_name(t.dtype), t.shape.to_string()));
  }
  return value;
}

/// The first of the layer's candidate names the checkpoint holds, or "".
std::string present(const WeightStore& weights, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (weights.contains(n)) return n;
  return "";
}

float abs_max(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

}  // namespace

DType resolve_cpu_kv_cache_dtype(const ModelDefinition& definition, const KVCacheOptions& options) {
  const std::optional<DType> flag = kv::parse_kv_cache_dtype(options.dtype);
  const DType dtype = flag.value_or(definition.auto_kv_cache_dtype.value_or(DType::kF32));
  if (options.calculate_scales && !kv::kv_cache_dtype_scaled(dtype)) {
    throw InvalidArgument(fmt::format(
        "--calculate-kv-scales: the KV cache is {} (--kv-cache-dtype {}); scales are for fp8 and "
        "int8 caches (--kv-cache-dtype fp8, fp8_e5m2 or int8)",
        kv::kv_cache_dtype_name(dtype), options.dtype));
  }
  return dtype;
}

std::vector<cpu::KVScales> read_kv_cache_scales(const ModelDefinition& definition,
                                                const WeightStore& weights, DType dtype,
                                                bool calculate, KVScaleSource* source) {
  std::vector<cpu::KVScales> scales(definition.layers.size());
  *source = KVScaleSource{0, calculate};
  if (!kv::kv_cache_dtype_scaled(dtype) || calculate) return scales;
  // Checkpoint scales map the largest value to e4m3's 448; int8's largest code is 127.
  const float factor = dtype == DType::kI8 ? kE4M3Range / kInt8Range : 1.0f;
  for (size_t l = 0; l < definition.layers.size(); ++l) {
    const AttentionDef& a = definition.layers[l].attention;
    const std::string k = present(weights, kv_scale_names(a, 'k'));
    const std::string v = present(weights, kv_scale_names(a, 'v'));
    if (k.empty() != v.empty()) {
      throw InvalidArgument(fmt::format("{}: layer {} has a {} but no {} scale",
                                        weights.description(), l, k.empty() ? v : k,
                                        k.empty() ? "k" : "v"));
    }
    if (k.empty()) continue;
    scales[l] = cpu::KVScales{read_scale(weights, k) * factor, read_scale(weights, v) * factor};
    ++source->from_checkpoint;
  }
  return scales;
}

cpu::KVScales calculated_kv_scales(const float* k, const float* v, int64_t n, DType dtype) {
  const bool int8 = dtype == DType::kI8;
  auto scale = [](float max, float range) {
    const float s = max / range;
    return std::isfinite(s) && s > 0 ? s : 1.0f;
  };
  return cpu::KVScales{scale(abs_max(k, n), int8 ? kInt8Range : kFp8KeyRange),
                       scale(abs_max(v, n), int8 ? kInt8Range : kFp8ValueRange)};
}

}  // namespace pagoda
