// FP4 weights, weight-only (W4A16), as compressed-tensors and ModelOpt write them:
//   NVFP4 (nvfp4-pack-quantized, group 16)
//     <prefix>.weight_packed        uint8 [rows, in / 2]   two float4_e2m1 codes per byte, the
//                                                          even input feature in the low nibble
//     <prefix>.weight_scale         float8_e4m3fn [rows, in / 16]
//     <prefix>.weight_global_scale  float32 [1]            stored inverted: w = code * scale / g
//   MXFP4 (mxfp4-pack-quantized, group 32, OCP MX)
//     <prefix>.weight_packed        uint8 [rows, in / 2]
//     <prefix>.weight_scale         uint8 [rows, in / 32]  float8_e8m0: 2^(e - 127)
//   NVFP4 by ModelOpt (quant_method modelopt, quant_algo NVFP4)
//     <prefix>.weight               uint8 [rows, in / 2]   the same packing
//     <prefix>.weight_scale         float8_e4m3fn [rows, in / 16]
//     <prefix>.weight_scale_2       float32 [] or [1]      not inverted: w = code * scale * s2
//     <prefix>.input_scale          float32 [] or [1]      the activations' global scale of W4A4
//                                                          (read by Blackwell kernels only)
// Example: byte 0x2b at [j, 3] holds features 6 (0xb: -1.5) and 7 (0x2: 1.0); with an NVFP4
// scale 0x38 (1.0) and a global scale 4, features 6 and 7 are -0.375 and 0.25.
//
// How it works: each block scale is decoded once at load (NVFP4: float(e4m3) / global, one fp32
// division; a fused projection keeps each source's own global scale, where vLLM's Marlin path
// takes their maximum), the codes are decoded per tile (cpu::dequantize_rows). What Blackwell
// adds: FP4 tensor cores (sm_100 mma with block-scaled operands), which multiply these codes and
// scales directly, and NVFP4 activations (W4A4); Hopper dequantizes to bf16 in registers.
#include <fmt/format.h>

#include "core/fp8.h"
#include "core/status.h"
#include "kernels/cpu/quant_dequant.h"
#include "model/quant/quant_linear.h"

namespace pagoda {
namespace {

/// The tensor names of one FP4 checkpoint layout.
struct Fp4Names {
  const char* packed;
  const char* global;  // nullptr: no global scale (MXFP4)
  bool global_inverted;
  const char* input_scale;  // nullptr: none
};

Fp4Names fp4_names(const LinearDef& def) {
  if (def.format == WeightFormat::kMxfp4) return {"weight_packed", nullptr, false, nullptr};
  if (def.quant.method == "modelopt_fp4") return {"weight", "weight_scale_2", false, "input_scale"};
  return {"weight_packed", "weight_global_scale", true, nullptr};
}

class Fp4Method final : public LinearMethod {
 public:
  explicit Fp4Method(bool nv) : nv_(nv) {}
  WeightFormat format() const override { return nv_ ? WeightFormat::kNvfp4 : WeightFormat::kMxfp4; }

  std::vector<TensorSpec> tensors(const LinearDef& def) const override {
    const int64_t block = def.quant.group_size;
    const Fp4Names names = fp4_names(def);
    std::vector<TensorSpec> out;
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s);
      out.push_back({s.prefix + "." + names.packed, Shape{rows, def.in / 2}, def.shard, DType::kU8,
                     DummyFill::kRandomBits, 0});
      if (nv_) {
        // code * 1.0 / 173.4: |w| <= 6 / 173.4 = 0.0346, as dense dummy weights.
        out.push_back({s.prefix + ".weight_scale", Shape{rows, def.in / block}, def.shard,
                       DType::kF8E4M3, DummyFill::kConstant, 1.0});
        const double global = names.global_inverted ? 6.0 / 0.0346 : 0.0346 / 6.0;
        out.push_back({s.prefix + "." + names.global, Shape{1}, ShardDim::kNone, DType::kF32,
                       DummyFill::kConstant, global});
        if (names.input_scale != nullptr) {
          out.push_back({s.prefix + "." + names.input_scale, Shape{1}, ShardDim::kNone, DType::kF32,
                         DummyFill::kConstant, 1.0});
        }
      } else {
        // 2^(120 - 127) * 6 = 0.047.
        out.push_back({s.prefix + ".weight_scale", Shape{rows, def.in / block}, def.shard,
                       DType::kU8, DummyFill::kConstant, 120});
      }
    }
    add_bias_specs(def, out);
    return out;
  }

  std::unique_ptr<CpuLinear> bind_cpu(const LinearDef& def,
                                      const WeightStore& weights) const override {
    const int64_t block = def.quant.group_size;
    if (def.in % block != 0) {
      throw InvalidArgument(fmt::format(
          "{}: {}: {} input features are not a multiple of the {} "
          "block ({})",
          weights.description(), def.name, def.in, weight_format_name(def.format), block));
    }
    const Fp4Names names = fp4_names(def);
    std::vector<DequantCpuLinear::Part> parts;
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s);
      const Tensor& packed = checked_quant_tensor(weights, s.prefix + "." + names.packed,
                                                  {Shape{rows, def.in / 2}}, {DType::kU8}, def);
      const Tensor& scale =
          checked_quant_tensor(weights, s.prefix + ".weight_scale", {Shape{rows, def.in / block}},
                               {nv_ ? DType::kF8E4M3 : DType::kU8}, def);
      float global = 1.0f;
      if (names.global != nullptr)
        global = scalar_scale(weights, s.prefix + "." + names.global, def);
      auto scales = std::make_shared<std::vector<float>>(static_cast<size_t>(scale.num_elements()));
      for (size_t i = 0; i < scales->size(); ++i) {
        const uint8_t code = scale.as<uint8_t>()[i];
        if (!nv_) {
          (*scales)[i] = e8m0_to_float(code);
        } else {
          (*scales)[i] =
              names.global_inverted ? e4m3_to_float(code) / global : e4m3_to_float(code) * global;
        }
      }
      cpu::Fp4Weight fw;
      fw.packed = packed.as<uint8_t>();
      fw.n = rows;
      fw.k = def.in;
      fw.block = block;
      fw.scales = scales->data();
      parts.push_back(
          {def.source_offset(s), rows,
           [fw](int64_t r0, int64_t r1, float* dst) { cpu::dequantize_rows(fw, r0, r1, dst); },
           scales});
    }
    return std::make_unique<DequantCpuLinear>(def, std::move(parts), stacked_bias(def, weights),
                                              DequantCpuLinear::Prepare{});
  }

 private:
  bool nv_;
};

}  // namespace

const LinearMethod& nvfp4_linear_method() {
  static const Fp4Method m(true);
  return m;
}
const LinearMethod& mxfp4_linear_method() {
  static const Fp4Method m(false);
  return m;
}

}  // namespace pagoda
