#include "model/quant/quant_linear.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/half.h"
#include "core/status.h"

namespace pagoda {
namespace {

std::string dtype_list(std::initializer_list<DType> dtypes) {
  std::string out;
  for (DType d : dtypes) out += (out.empty() ? "" : ", ") + std::string(dtype_name(d));
  return out;
}

std::string format_label(const LinearDef& def) {
  return fmt::format("{} ({})", weight_format_name(def.format), def.quant.method);
}

}  // namespace

const Tensor& checked_quant_tensor(const WeightStore& weights, const std::string& name,
                                   std::initializer_list<Shape> shapes,
                                   std::initializer_list<DType> dtypes, const LinearDef& def) {
  if (!weights.contains(name)) {
    throw InvalidArgument(fmt::format("{}: tensor '{}' of the {} projection {} is missing",
                                      weights.description(), name, format_label(def), def.name));
  }
  const Tensor& t = weights.get(name);
  if (std::none_of(shapes.begin(), shapes.end(), [&](const Shape& s) { return s == t.shape; })) {
    std::string expected;
    for (const Shape& s : shapes) expected += (expected.empty() ? "" : " or ") + s.to_string();
    throw InvalidArgument(fmt::format("{}: tensor '{}' has shape {}, expected {} ({} format)",
                                      weights.source_of(name), name, t.shape.to_string(), expected,
                                      format_label(def)));
  }
  if (std::find(dtypes.begin(), dtypes.end(), t.dtype) == dtypes.end()) {
    throw InvalidArgument(fmt::format("{}: tensor '{}' has dtype {}, expected {} ({} format)",
                                      weights.source_of(name), name, dtype_name(t.dtype),
                                      dtype_list(dtypes), format_label(def)));
  }
  return t;
}

std::vector<float> float_values(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype) {
      case DType::kF32:
        out[i] = t.as<float>()[i];
        break;
      case DType::kBF16:
        out[i] = bf16_to_float(t.as<uint16_t>()[i]);
        break;
      case DType::kF16:
        out[i] = f16_to_float(t.as<uint16_t>()[i]);
        break;
      default:
        PAGODA_CHECK(false, "float_values of a {} tensor", dtype_name(t.dtype));
    }
  }
  return out;
}

float scalar_scale(const WeightStore& weights, const std::string& name, const LinearDef& def) {
  const Tensor& t = checked_quant_tensor(weights, name, {Shape{}, Shape{1}},
                                         {DType::kF32, DType::kBF16, DType::kF16}, def);
  const float v = float_values(t)[0];
  if (!(v > 0) || !std::isfinite(v)) {
    throw InvalidArgument(fmt::format("{}: scale '{}' is {}, expected a positive finite value",
                                      weights.source_of(name), name, v));
  }
  return v;
}

void check_zero_points_absent(const WeightStore& weights, const std::string& name,
                              const LinearDef& def) {
  if (!weights.contains(name)) return;
  const Tensor& t = weights.get(name);
  const auto* bytes = static_cast<const unsigned char*>(t.data);
  if (std::any_of(bytes, bytes + t.num_bytes(), [](unsigned char b) { return b != 0; })) {
    throw InvalidArgument(
        fmt::format("{}: tensor '{}' holds non-zero zero points, but the {} scheme is symmetric",
                    weights.source_of(name), name, format_label(def)));
  }
}

std::vector<float> stacked_bias(const LinearDef& def, const WeightStore& weights) {
  std::vector<float> bias;
  if (!def.bias) return bias;
  bias.resize(static_cast<size_t>(def.out()));
  for (const LinearDef::Source& s : def.sources) {
    const int64_t rows = def.source_rows(s);
    const std::vector<float> b =
        float_values(checked_float_tensor(weights, s.prefix + ".bias", Shape{rows}));
    std::copy(b.begin(), b.end(), bias.begin() + def.source_offset(s));
  }
  return bias;
}

void add_bias_specs(const LinearDef& def, std::vector<TensorSpec>& out) {
  if (!def.bias) return;
  const ShardDim shard = def.shard == ShardDim::kOut ? ShardDim::kOut : ShardDim::kNone;
  for (const LinearDef::Source& s : def.sources)
    out.push_back({s.prefix + ".bias", Shape{def.source_rows(s)}, shard});
}

DequantCpuLinear::DequantCpuLinear(const LinearDef& def, std::vector<Part> parts,
                                   std::vector<float> bias, Prepare prepare)
    : out_(def.out()),
      in_(def.in),
      parts_(std::move(parts)),
      bias_(std::move(bias)),
      prepare_(std::move(prepare)) {}

void DequantCpuLinear::apply(const OpContext& ctx, const Tensor& x, const Tensor& y) {
  PAGODA_CHECK(x.shape.rank() == 2 && x.shape[1] == in_ && y.shape.rank() == 2 &&
                   y.shape[0] == x.shape[0] && y.shape[1] == out_,
               "linear [{} -> {}]: x {} y {}", in_, out_, x.shape.to_string(), y.shape.to_string());
  const int64_t m = x.shape[0];
  const float* input = x.as<float>();
  if (prepare_) {
    prepared_.resize(static_cast<size_t>(m * in_));
    prepare_(input, m, prepared_.data());
    input = prepared_.data();
  }
  for (const Part& p : parts_) {
    cpu::dequant_matmul(input, m, in_, p.rows, p.dequantize, y.as<float>() + p.offset, out_,
                        *ctx.pool);
  }
  if (!bias_.empty()) {
    for (int64_t r = 0; r < m; ++r) {
      float* row = y.as<float>() + r * out_;
      for (int64_t j = 0; j < out_; ++j) row[j] += bias_[static_cast<size_t>(j)];
    }
  }
}

}  // namespace pagoda
