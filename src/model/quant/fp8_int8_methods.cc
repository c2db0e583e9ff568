// The 8-bit formats: FP8 W8A8 / W8A16 (compressed-tensors float-quantized, vLLM's serialized fp8),
// FP8 quantized at load (--quantization fp8) and INT8 W8A8 (compressed-tensors int-quantized).
//
// Checkpoint tensors per source "<prefix>" (a fused projection stacks its sources' rows):
//   kFp8   <prefix>.weight        float8_e4m3fn [rows, in]
//          <prefix>.weight_scale  per tensor [] or [1]; per channel [rows, 1] (or [rows]);
//                                 per block [ceil(rows / bo), ceil(in / bi)] (named
//                                 weight_scale_inv by quant_method fp8, weight_scale by
//                                 compressed-tensors)
//          <prefix>.input_scale   [] or [1], static activations only
//   kInt8  <prefix>.weight int8 [rows, in], weight_scale as kFp8 (tensor or channel),
//          input_scale when static; weight_zero_point / input_zero_point, when written, all zero
// Scales are fp32, bf16 or f16 (llm-compressor writes the model's dtype, AutoFP8 fp32).
//
// How it works. FP8: each tile of rows is decoded as e4m3(q) * scale in fp32 (a per-tensor scale
// is per source, so a fused qkv keeps q's, k's and v's own scales exactly, where vLLM requantizes
// them to their maximum), and the input is quantized and dequantized as the GPU kernels quantize
// it (cpu::fake_quantize_fp8_rows; a static input scale is the largest of the sources', as in
// vLLM). INT8: the input is quantized per token (or by the static scale) and each output is the
// exact int32 dot times x_scale[i] * w_scale[j] (cpu::int8_matmul), the weights read in place.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/fp8.h"
#include "core/status.h"
#include "kernels/cpu/quant_dequant.h"
#include "model/quant/quant_linear.h"

namespace pagoda {
namespace {

constexpr float kDummyWeight = 0.0346f;  // dense dummy weights are uniform in +-0.0346
constexpr float kDummyInputScale = 0.05f;
const std::initializer_list<DType> kScaleDtypes = {DType::kF32, DType::kBF16, DType::kF16};

std::string scale_name(const LinearDef& def) {
  // DeepSeek-style block FP8 (quant_method fp8) stores the scale as weight_scale_inv; it is the
  // same multiplier (the name recalls that it inverts the quantization).
  return def.quant.method == "fp8" && def.quant.weight_scales == ScaleStrategy::kBlock
             ? "weight_scale_inv"
             : "weight_scale";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The specs of an 8-bit weight and its scales (kFp8 and kInt8).
std::vector<TensorSpec> eight_bit_specs(const LinearDef& def, DType weight_dtype, float qmax) {
  std::vector<TensorSpec> out;
  const QuantParams& q = def.quant;
  for (const LinearDef::Source& s : def.sources) {
    const int64_t rows = def.source_rows(s);
    out.push_back({s.prefix + ".weight", Shape{rows, def.in}, def.shard, weight_dtype,
                   DummyFill::kUniform, qmax});
    Shape scale_shape{1};
    if (q.weight_scales == ScaleStrategy::kChannel) scale_shape = Shape{rows, 1};
    if (q.weight_scales == ScaleStrategy::kBlock)
      scale_shape = Shape{ceil_div(rows, q.block_out), ceil_div(def.in, q.block_in)};
    out.push_back({s.prefix + "." + scale_name(def), scale_shape,
                   q.weight_scales == ScaleStrategy::kTensor ? ShardDim::kNone : def.shard,
                   DType::kF32, DummyFill::kConstant, kDummyWeight / qmax});
    if (q.activations == ActivationQuant::kStaticTensor) {
      out.push_back({s.prefix + ".input_scale", Shape{1}, ShardDim::kNone, DType::kF32,
                     DummyFill::kConstant, kDummyInputScale});
    }
  }
  add_bias_specs(def, out);
  return out;
}

/// Per-row weight scales of one source (per tensor: the source's scale on every row).
std::vector<float> row_scales(const WeightStore& weights, const LinearDef& def,
                              const LinearDef::Source& s) {
  const int64_t rows = def.source_rows(s);
  const std::string name = s.prefix + "." + scale_name(def);
  if (def.quant.weight_scales == ScaleStrategy::kTensor)
    return std::vector<float>(static_cast<size_t>(rows), scalar_scale(weights, name, def));
  return float_values(
      checked_quant_tensor(weights, name, {Shape{rows, 1}, Shape{rows}}, kScaleDtypes, def));
}

/// The static input scale of a projection: the largest of its sources' (vLLM).
float static_input_scale(const WeightStore& weights, const LinearDef& def) {
  float s = 0;
  for (const LinearDef::Source& src : def.sources)
    s = std::max(s, scalar_scale(weights, src.prefix + ".input_scale", def));
  return s;
}

DequantCpuLinear::Prepare fp8_input(const LinearDef& def, const WeightStore& weights) {
  const int64_t in = def.in;
  switch (def.quant.activations) {
    case ActivationQuant::kNone:
      return {};
    case ActivationQuant::kStaticTensor: {
      const float s = static_input_scale(weights, def);
      return [in, s](const float* x, int64_t m, float* out) {
        cpu::fake_quantize_fp8_rows(x, m, in, s, in, out);
      };
    }
    case ActivationQuant::kDynamicToken:
      return [in](const float* x, int64_t m, float* out) {
        cpu::fake_quantize_fp8_rows(x, m, in, 0.0f, in, out);
      };
    case ActivationQuant::kDynamicGroup: {
      const int64_t group = def.quant.block_in;
      return [in, group](const float* x, int64_t m, float* out) {
        cpu::fake_quantize_fp8_rows(x, m, in, 0.0f, group, out);
      };
    }
  }
  return {};
}

DequantCpuLinear::Part fp8_part(const LinearDef& def, const LinearDef::Source& s, const uint8_t* w,
                                std::vector<float> scales) {
  auto keep = std::make_shared<std::vector<float>>(std::move(scales));
  cpu::Fp8Weight fw;
  fw.w = w;
  fw.n = def.source_rows(s);
  fw.k = def.in;
  if (def.quant.weight_scales == ScaleStrategy::kBlock) {
    fw.block_scale = keep->data();
    fw.block_out = def.quant.block_out;
    fw.block_in = def.quant.block_in;
  } else {
    fw.row_scale = keep->data();
  }
  return {def.source_offset(s), fw.n,
          [fw](int64_t r0, int64_t r1, float* dst) { cpu::dequantize_rows(fw, r0, r1, dst); },
          keep};
}

class Fp8Method final : public LinearMethod {
 public:
  WeightFormat format() const override { return WeightFormat::kFp8; }
  std::vector<TensorSpec> tensors(const LinearDef& def) const override {
    return eight_bit_specs(def, DType::kF8E4M3, kE4M3Max);
  }
  std::unique_ptr<CpuLinear> bind_cpu(const LinearDef& def,
                                      const WeightStore& weights) const override {
    const QuantParams& q = def.quant;
    std::vector<DequantCpuLinear::Part> parts;
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s);
      const Tensor& w = checked_quant_tensor(weights, s.prefix + ".weight", {Shape{rows, def.in}},
                                             {DType::kF8E4M3}, def);
      check_zero_points_absent(weights, s.prefix + ".weight_zero_point", def);
      check_zero_points_absent(weights, s.prefix + ".input_zero_point", def);
      std::vector<float> scales;
      if (q.weight_scales == ScaleStrategy::kBlock) {
        if (def.sources.size() > 1 && rows % q.block_out != 0) {
          throw InvalidArgument(fmt::format(
              "{}: {} has {} rows, not a multiple of the FP8 block ({}): its blocks would "
              "straddle the fused projection's parts",
              weights.description(), s.prefix, rows, q.block_out));
        }
        scales = float_values(checked_quant_tensor(
            weights, s.prefix + "." + scale_name(def),
            {Shape{ceil_div(rows, q.block_out), ceil_div(def.in, q.block_in)}}, kScaleDtypes, def));
      } else {
        scales = row_scales(weights, def, s);
      }
      parts.push_back(fp8_part(def, s, w.as<uint8_t>(), std::move(scales)));
    }
    return std::make_unique<DequantCpuLinear>(def, std::move(parts), stacked_bias(def, weights),
                                              fp8_input(def, weights));
  }
};

/// --quantization fp8 on a float checkpoint: per output row s = max|w| / 448 (1 for a zero row),
/// q = e4m3(w / s), kept in memory the projection owns.
class Fp8OnlineMethod final : public LinearMethod {
 public:
  WeightFormat format() const override { return WeightFormat::kFp8Online; }
  std::vector<TensorSpec> tensors(const LinearDef& def) const override {
    LinearDef dense = def;
    dense.format = WeightFormat::kDense;
    return linear_method(WeightFormat::kDense).tensors(dense);
  }
  std::unique_ptr<CpuLinear> bind_cpu(const LinearDef& def,
                                      const WeightStore& weights) const override {
    std::vector<DequantCpuLinear::Part> parts;
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s);
      const std::vector<float> w =
          float_values(checked_float_tensor(weights, s.prefix + ".weight", Shape{rows, def.in}));
      auto q = std::make_shared<std::vector<uint8_t>>(w.size());
      std::vector<float> scales(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = w.data() + r * def.in;
        float amax = 0;
        for (int64_t l = 0; l < def.in; ++l) amax = std::max(amax, std::fabs(row[l]));
        const float scale = amax > 0 ? amax / kE4M3Max : 1.0f;
        scales[static_cast<size_t>(r)] = scale;
        for (int64_t l = 0; l < def.in; ++l)
          (*q)[static_cast<size_t>(r * def.in + l)] = float_to_e4m3(row[l] / scale);
      }
      DequantCpuLinear::Part part = fp8_part(def, s, q->data(), std::move(scales));
      part.keep =
          std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(part.keep, q);
      parts.push_back(std::move(part));
    }
    return std::make_unique<DequantCpuLinear>(def, std::move(parts), stacked_bias(def, weights),
                                              fp8_input(def, weights));
  }
};

/// INT8 W8A8 on the CPU: see the note at the top.
class Int8CpuLinear final : public CpuLinear {
 public:
  struct Part {
    int64_t offset, rows;
    const int8_t* w;            // [rows, in], in place
    std::vector<float> scale;   // [rows]
    std::vector<int32_t> sums;  // [rows]: sum of each weight row
  };
  Int8CpuLinear(const LinearDef& def, std::vector<Part> parts, std::vector<float> bias,
                float static_scale)
      : out_(def.out()),
        in_(def.in),
        parts_(std::move(parts)),
        bias_(std::move(bias)),
        static_scale_(static_scale) {}

  void apply(const OpContext& ctx, const Tensor& x, const Tensor& y) override {
    PAGODA_CHECK(x.shape.rank() == 2 && x.shape[1] == in_ && y.shape.rank() == 2 &&
                     y.shape[0] == x.shape[0] && y.shape[1] == out_,
                 "linear [{} -> {}]: x {} y {}", in_, out_, x.shape.to_string(),
                 y.shape.to_string());
    const int64_t m = x.shape[0];
    qx_.resize(static_cast<size_t>(m * in_));
    sx_.resize(static_cast<size_t>(m));
    cpu::quantize_int8_rows(x.as<float>(), m, in_, static_scale_, qx_.data(), sx_.data());
    for (const Part& p : parts_) {
      cpu::Int8MatmulParams mp;
      mp.qx = qx_.data();
      mp.x_scale = sx_.data();
      mp.m = m;
      mp.k = in_;
      mp.qw = p.w;
      mp.w_row_sums = p.sums.data();
      mp.w_scale = p.scale.data();
      mp.bias = bias_.empty() ? nullptr : bias_.data() + p.offset;
      mp.n = p.rows;
      mp.y = y.as<float>() + p.offset;
      mp.ldy = out_;
      cpu::int8_matmul(mp, *ctx.pool);
    }
  }

 private:
  int64_t out_, in_;
  std::vector<Part> parts_;
  std::vector<float> bias_;
  float static_scale_;  // > 0: static activations
  std::vector<int8_t> qx_;
  std::vector<float> sx_;
};

class Int8Method final : public LinearMethod {
 public:
  WeightFormat format() const override { return WeightFormat::kInt8; }
  std::vector<TensorSpec> tensors(const LinearDef& def) const override {
    return eight_bit_specs(def, DType::kI8, 127.0f);
  }
  std::unique_ptr<CpuLinear> bind_cpu(const LinearDef& def,
                                      const WeightStore& weights) const override {
    std::vector<Int8CpuLinear::Part> parts;
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s);
      const Tensor& w = checked_quant_tensor(weights, s.prefix + ".weight", {Shape{rows, def.in}},
                                             {DType::kI8}, def);
      check_zero_points_absent(weights, s.prefix + ".weight_zero_point", def);
      check_zero_points_absent(weights, s.prefix + ".input_zero_point", def);
      Int8CpuLinear::Part p{
          def.source_offset(s), rows, w.as<int8_t>(), row_scales(weights, def, s), {}};
      p.sums.resize(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        int32_t sum = 0;
        for (int64_t l = 0; l < def.in; ++l) sum += p.w[r * def.in + l];
        p.sums[static_cast<size_t>(r)] = sum;
      }
      parts.push_back(std::move(p));
    }
    const float static_scale = def.quant.activations == ActivationQuant::kStaticTensor
                                   ? static_input_scale(weights, def)
                                   : 0.0f;
    return std::make_unique<Int8CpuLinear>(def, std::move(parts), stacked_bias(def, weights),
                                           static_scale);
  }
};

}  // namespace

const LinearMethod& fp8_linear_method() {
  static const Fp8Method m;
  return m;
}
const LinearMethod& fp8_online_linear_method() {
  static const Fp8OnlineMethod m;
  return m;
}
const LinearMethod& int8_linear_method() {
  static const Int8Method m;
  return m;
}

}  // namespace pagoda
