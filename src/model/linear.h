#pragma once
// Linear: a projection that owns its weight format. One LinearMethod per WeightFormat names the
// checkpoint tensors a LinearDef needs, checks them, binds them for the CPU (in place where it
// can: the checkpoint is memory-mapped) and multiplies by them. The CUDA backend implements the
// same formats for the GPU (runtime/cuda/cuda_linear.h); quantized formats add a method each.
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/definition.h"
#include "model/loader/safetensors.h"
#include "ops/op_context.h"

namespace pagoda {

/// A Linear bound for the CPU.
class CpuLinear {
 public:
  virtual ~CpuLinear() = default;
  /// y[m, def.out()] = x[m, def.in] W^T (+ b). x and y fp32 on the CPU; y must not alias x.
  virtual void apply(const OpContext& ctx, const Tensor& x, const Tensor& y) = 0;
};

/// How the projections of one weight format are loaded and applied.
class LinearMethod {
 public:
  virtual ~LinearMethod() = default;
  [[nodiscard]] virtual WeightFormat format() const = 0;
  /// The checkpoint tensors of `def`: each source's weight, then each source's bias.
  [[nodiscard]] virtual std::vector<TensorSpec> tensors(const LinearDef& def) const = 0;
  /// Checks def's tensors in `weights` (present, shape, dtype) and binds them for the CPU;
  /// InvalidArgument naming the file and the tensor.
  [[nodiscard]] virtual std::unique_ptr<CpuLinear> bind_cpu(const LinearDef& def,
                                                            const WeightStore& weights) const = 0;
};

/// The method of a format.
[[nodiscard]] const LinearMethod& linear_method(WeightFormat format);

/// Tensor `name` of `weights`, checked to have `shape` and a float dtype (f32, bf16, f16);
/// InvalidArgument naming the checkpoint file otherwise.
[[nodiscard]] const Tensor& checked_float_tensor(const WeightStore& weights,
                                                 const std::string& name, const Shape& shape);

}  // namespace pagoda
