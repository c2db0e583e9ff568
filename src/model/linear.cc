#include "model/linear.h"

#include <cstring>

#include "core/half.h"
#include "core/status.h"
#include "ops/ops.h"

namespace pagoda {
namespace {

/// A float tensor widened to fp32 into memory the caller owns (biases: negligible in size).
void widen_into(const Tensor& t, float* dst) {
  const int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::kF32:
        dst[i] = t.as<float>()[i];
        break;
      case DType::kBF16:
        dst[i] = bf16_to_float(t.as<uint16_t>()[i]);
        break;
      default:
        dst[i] = f16_to_float(t.as<uint16_t>()[i]);
        break;
    }
  }
}

/// Dense weights on the CPU: each source's [rows, in] tensor is used in place. A single source is
/// one product; several (Llama's q, k, v) are one product each into a scratch [m, rows] whose
/// columns are copied to their place in y (the copy is O(m * out), the products O(m * out * in)).
class DenseCpuLinear final : public CpuLinear {
 public:
  DenseCpuLinear(const LinearDef& def, const WeightStore& weights) : out_(def.out()), in_(def.in) {
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s);
      parts_.push_back({checked_float_tensor(weights, s.prefix + ".weight", Shape{rows, in_}),
                        def.source_offset(s), rows});
    }
    if (def.bias) {
      bias_ = Buffer(static_cast<size_t>(out_) * sizeof(float));
      for (size_t i = 0; i < parts_.size(); ++i) {
        widen_into(
            checked_float_tensor(weights, def.sources[i].prefix + ".bias", Shape{parts_[i].rows}),
            bias_.as<float>() + parts_[i].offset);
      }
      bias_tensor_ = Tensor{bias_.data(), DType::kF32, Shape{out_}};
    }
  }

  void apply(const OpContext& ctx, const Tensor& x, const Tensor& y) override {
    PAGODA_CHECK(x.shape.rank() == 2 && x.shape[1] == in_ && y.shape.rank() == 2 &&
                     y.shape[0] == x.shape[0] && y.shape[1] == out_,
                 "linear [{} -> {}]: x {} y {}", in_, out_, x.shape.to_string(),
                 y.shape.to_string());
    const Tensor* bias = bias_tensor_.data != nullptr ? &bias_tensor_ : nullptr;
    if (parts_.size() == 1) {
      ops::linear(ctx, x, parts_[0].weight, bias, y);
      return;
    }
    const int64_t m = x.shape[0];
    for (const Part& p : parts_) {
      scratch_.resize(static_cast<size_t>(m * p.rows));
      const Tensor part_y{scratch_.data(), DType::kF32, Shape{m, p.rows}};
      const Tensor part_bias{bias ? bias_.as<float>() + p.offset : nullptr, DType::kF32,
                             Shape{p.rows}};
      ops::linear(ctx, x, p.weight, bias ? &part_bias : nullptr, part_y);
      // y[r, offset + j] = part_y[r, j]
      for (int64_t r = 0; r < m; ++r) {
        std::memcpy(y.as<float>() + r * out_ + p.offset, scratch_.data() + r * p.rows,
                    static_cast<size_t>(p.rows) * sizeof(float));
      }
    }
  }

 private:
  struct Part {
    Tensor weight;   // [rows, in], the checkpoint's (mmapped) tensor
    int64_t offset;  // first row in W
    int64_t rows;
  };
  int64_t out_, in_;
  std::vector<Part> parts_;
  Buffer bias_;  // [out] fp32, all sources' biases
  Tensor bias_tensor_;
  std::vector<float> scratch_;  // [m, rows] of one part
};

class DenseMethod final : public LinearMethod {
 public:
  WeightFormat format() const override { return WeightFormat::kDense; }

  std::vector<TensorSpec> tensors(const LinearDef& def) const override {
    std::vector<TensorSpec> out;
    for (const LinearDef::Source& s : def.sources)
      out.push_back({s.prefix + ".weight", Shape{def.source_rows(s), def.in}, def.shard});
    if (def.bias) {
      // A row-parallel projection's bias is added once, after the all-reduce: every rank has it.
      const ShardDim shard = def.shard == ShardDim::kOut ? ShardDim::kOut : ShardDim::kNone;
      for (const LinearDef::Source& s : def.sources)
        out.push_back({s.prefix + ".bias", Shape{def.source_rows(s)}, shard});
    }
    return out;
  }

  std::unique_ptr<CpuLinear> bind_cpu(const LinearDef& def,
                                      const WeightStore& weights) const override {
    return std::make_unique<DenseCpuLinear>(def, weights);
  }
};

}  // namespace

const LinearMethod& linear_method(WeightFormat format) {
  static const DenseMethod dense;
  switch (format) {
    case WeightFormat::kDense:
      return dense;
  }
  PAGODA_CHECK(false, "unknown weight format {}", static_cast<int>(format));
  return dense;
}

const Tensor& checked_float_tensor(const WeightStore& weights, const std::string& name,
                                   const Shape& shape) {
  const Tensor& t = weights.get(name);
  if (!(t.shape == shape)) {
    throw InvalidArgument(fmt::format("{}: tensor '{}' has shape {}, expected {}",
                                      weights.source_of(name), name, t.shape.to_string(),
                                      shape.to_string()));
  }
  if (!is_float_weight_dtype(t.dtype)) {
    throw InvalidArgument(
        fmt::format("{}: tensor '{}' has dtype {}, expected float32, bfloat16 or float16",
                    weights.source_of(name), name, dtype_name(t.dtype)));
  }
  return t;
}

}  // namespace pagoda
