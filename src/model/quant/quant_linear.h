#pragma once
// What the quantized LinearMethods share: checked access to their tensors (dtype lists, scalar
// scales), the stacked-sources CPU projection over cpu::dequant_matmul, and the methods
// themselves (one per WeightFormat; model/linear.cc dispatches to them).
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/quant_gemm.h"
#include "model/linear.h"

namespace pagoda {

/// Tensor `name` of `weights` with `shape` (any of `shapes`) and one of `dtypes`;
/// InvalidArgument naming the file, the tensor and the format otherwise.
[[nodiscard]] const Tensor& checked_quant_tensor(const WeightStore& weights,
                                                 const std::string& name,
                                                 std::initializer_list<Shape> shapes,
                                                 std::initializer_list<DType> dtypes,
                                                 const LinearDef& def);

/// Every element of a float tensor (f32, bf16, f16) as fp32.
[[nodiscard]] std::vector<float> float_values(const Tensor& t);

/// A per-tensor scale: shape [] or [1], float; InvalidArgument otherwise.
[[nodiscard]] float scalar_scale(const WeightStore& weights, const std::string& name,
                                 const LinearDef& def);

/// A zero-point tensor the format does not use (symmetric): absent, or all zeros.
void check_zero_points_absent(const WeightStore& weights, const std::string& name,
                              const LinearDef& def);

/// def's biases stacked as fp32 [out] (empty when def has none).
[[nodiscard]] std::vector<float> stacked_bias(const LinearDef& def, const WeightStore& weights);

/// The specs of def's biases (each source's "<prefix>.bias" in the checkpoint's float dtype).
void add_bias_specs(const LinearDef& def, std::vector<TensorSpec>& out);

/// A projection whose sources each dequantize exactly to fp32 rows: per source one
/// cpu::dequant_matmul into its columns of y, after the input passed through `prepare` (FP8's
/// activation quantization; identity for weight-only formats), then the bias.
class DequantCpuLinear final : public CpuLinear {
 public:
  struct Part {
    int64_t offset = 0;  // first row of the source in W
    int64_t rows = 0;
    cpu::DequantizeRows dequantize;
    std::shared_ptr<void> keep;  // what `dequantize` reads (unpacked scales, zero points)
  };
  /// prepare(x, m, out): writes the input the products see into out [m, in]; empty: x itself.
  using Prepare = std::function<void(const float* x, int64_t m, float* out)>;

  DequantCpuLinear(const LinearDef& def, std::vector<Part> parts, std::vector<float> bias,
                   Prepare prepare);
  void apply(const OpContext& ctx, const Tensor& x, const Tensor& y) override;

 private:
  int64_t out_, in_;
  std::vector<Part> parts_;
  std::vector<float> bias_;
  Prepare prepare_;
  std::vector<float> prepared_;  // [m, in]
};

/// A GPTQ / AWQ source's small tensors, checked and unpacked to what quant_dequant.h's
/// GptqWeight / AwqWeight read (int4_methods.cc; the GPU's repack reads the same):
///   scales [groups, rows] fp32; zeros [groups, rows] effective zero points (GPTQ v1's +1 applied,
///   a symmetric checkpoint's read as 2^(bits - 1) as vLLM does); g_idx [in] each input feature's
///   group (GPTQ; l / group_size without act-order). The packed qweight is checked by the caller.
struct Int4Unpacked {
  std::vector<float> scales;
  std::vector<int32_t> zeros;
  std::vector<int32_t> g_idx;
};
[[nodiscard]] Int4Unpacked unpack_gptq_source(const WeightStore& weights, const LinearDef& def,
                                              const LinearDef::Source& source);
[[nodiscard]] Int4Unpacked unpack_awq_source(const WeightStore& weights, const LinearDef& def,
                                             const LinearDef::Source& source);
/// The qweight of a GPTQ ([in / pack, rows]) or AWQ ([in, rows / 8]) source, checked.
[[nodiscard]] const Tensor& int4_qweight(const WeightStore& weights, const LinearDef& def,
                                         const LinearDef::Source& source);

// The methods of the quantized formats (model/quant/*_methods.cc).
[[nodiscard]] const LinearMethod& fp8_linear_method();
[[nodiscard]] const LinearMethod& fp8_online_linear_method();
[[nodiscard]] const LinearMethod& int8_linear_method();
[[nodiscard]] const LinearMethod& gptq_linear_method();
[[nodiscard]] const LinearMethod& awq_linear_method();
[[nodiscard]] const LinearMethod& nvfp4_linear_method();
[[nodiscard]] const LinearMethod& mxfp4_linear_method();

}  // namespace pagoda
