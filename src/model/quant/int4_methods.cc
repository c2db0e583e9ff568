// GPTQ (AutoGPTQ, GPTQModel) and AWQ (AutoAWQ GEMM) weights: integers packed into int32 words,
// with a scale and a zero point per (group of input features, output row).
//
// Checkpoint tensors per source "<prefix>" (rows output features, in inputs, G the group size,
// pack = 32 / bits values per word):
//   GPTQ  qweight  int32 [in / pack, rows]     packed along in (quant_dequant.h, GptqWeight)
//         qzeros   int32 [in / G, rows / pack] packed along rows, value t of word c is row
//                                              c * pack + t; v1 ("gptq") stores zero - 1
//         scales   fp16  [in / G, rows]
//         g_idx    int32 [in]                  the group of each input feature (act-order:
//                                              any permutation of the groups; else l / G)
//   AWQ   qweight  int32 [in, rows / 8]        packed along rows in AWQ's order
//         qzeros   int32 [in / G, rows / 8]    the same packing
//         scales   fp16  [in / G, rows]
// w = scale * (q - zero) for both (AWQ writes (q - zero) * scale: the same exact product).
// Example (GPTQ v1, 4 bits, rows 8): qzeros word 0x77777777 holds zero - 1 = 7 for rows 0..7:
// zero 8 (a symmetric checkpoint); q = 0xb gives w = scale * (11 - 8) = 3 * scale.
//
// How it works: zero points and scales are unpacked to [groups, rows] int32 / fp32 at load (small:
// 1/G of the weight); qweight stays in place and each tile of rows is dequantized on the fly
// (cpu::dequantize_rows). Act-order needs no permutation on the CPU: each input feature reads its
// group through g_idx. (A GPU kernel instead sorts the input features by group at load, permuting
// qweight's rows and gathering x by the same permutation, as Marlin does.)
#include <fmt/format.h>

#include "core/logging.h"
#include "core/status.h"
#include "kernels/cpu/quant_dequant.h"
#include "model/quant/quant_linear.h"

namespace pagoda {
namespace {

constexpr float kDummyWeight = 0.0346f;
const std::initializer_list<DType> kScaleDtypes = {DType::kF16, DType::kBF16, DType::kF32};

/// An int32 whose every `bits`-wide field holds `value` (dummy zero points).
double repeated_field(int bits, uint32_t value) {
  uint32_t word = 0;
  for (int t = 0; t < 32 / bits; ++t) word |= value << (t * bits);
  return static_cast<double>(static_cast<int32_t>(word));
}

void require_divisible(const WeightStore& weights, const LinearDef& def, const std::string& what,
                       int64_t value, int64_t divisor) {
  if (divisor <= 0 || value % divisor != 0) {
    throw InvalidArgument(fmt::format("{}: {}: {} ({}) is not a multiple of {} ({} format)",
                                      weights.description(), def.name, what, value, divisor,
                                      weight_format_name(def.format)));
  }
}

class GptqMethod final : public LinearMethod {
 public:
  WeightFormat format() const override { return WeightFormat::kGptq; }

  std::vector<TensorSpec> tensors(const LinearDef& def) const override {
    const QuantParams& q = def.quant;
    const int pack = 32 / q.bits;
    const int64_t groups = def.in / q.group_size;
    const ShardDim in_shard = def.shard == ShardDim::kIn ? ShardDim::kIn : ShardDim::kNone;
    const uint32_t mid = 1u << (q.bits - 1);  // the symmetric zero point
    std::vector<TensorSpec> out;
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s);
      out.push_back({s.prefix + ".qweight", Shape{def.in / pack, rows}, def.shard, DType::kI32,
                     DummyFill::kRandomBits, 0});
      out.push_back({s.prefix + ".qzeros", Shape{groups, rows / pack}, def.shard, DType::kI32,
                     DummyFill::kConstant,
                     repeated_field(q.bits, q.gptq_zero_plus_one ? mid - 1 : mid)});
      out.push_back({s.prefix + ".scales", Shape{groups, rows}, def.shard, DType::kF16,
                     DummyFill::kConstant, kDummyWeight / static_cast<float>(mid)});
      out.push_back({s.prefix + ".g_idx", Shape{def.in}, in_shard, DType::kI32,
                     DummyFill::kGroupIndex, static_cast<double>(q.group_size)});
    }
    add_bias_specs(def, out);
    return out;
  }

  std::unique_ptr<CpuLinear> bind_cpu(const LinearDef& def,
                                      const WeightStore& weights) const override {
    std::vector<DequantCpuLinear::Part> parts;
    for (const LinearDef::Source& s : def.sources) {
      auto u = std::make_shared<Int4Unpacked>(unpack_gptq_source(weights, def, s));
      cpu::GptqWeight gw;
      gw.qweight = int4_qweight(weights, def, s).as<int32_t>();
      gw.bits = def.quant.bits;
      gw.n = def.source_rows(s);
      gw.k = def.in;
      gw.g_idx = u->g_idx.data();
      gw.scales = u->scales.data();
      gw.zeros = u->zeros.data();
      parts.push_back(
          {def.source_offset(s), gw.n,
           [gw](int64_t r0, int64_t r1, float* dst) { cpu::dequantize_rows(gw, r0, r1, dst); }, u});
    }
    return std::make_unique<DequantCpuLinear>(def, std::move(parts), stacked_bias(def, weights),
                                              DequantCpuLinear::Prepare{});
  }
};

class AwqMethod final : public LinearMethod {
 public:
  WeightFormat format() const override { return WeightFormat::kAwq; }

  std::vector<TensorSpec> tensors(const LinearDef& def) const override {
    const int64_t groups = def.in / def.quant.group_size;
    std::vector<TensorSpec> out;
    for (const LinearDef::Source& s : def.sources) {
      const int64_t rows = def.source_rows(s);
      out.push_back({s.prefix + ".qweight", Shape{def.in, rows / 8}, def.shard, DType::kI32,
                     DummyFill::kRandomBits, 0});
      out.push_back({s.prefix + ".qzeros", Shape{groups, rows / 8}, def.shard, DType::kI32,
                     DummyFill::kConstant, repeated_field(4, 8)});
      out.push_back({s.prefix + ".scales", Shape{groups, rows}, def.shard, DType::kF16,
                     DummyFill::kConstant, kDummyWeight / 8});
    }
    add_bias_specs(def, out);
    return out;
  }

  std::unique_ptr<CpuLinear> bind_cpu(const LinearDef& def,
                                      const WeightStore& weights) const override {
    std::vector<DequantCpuLinear::Part> parts;
    for (const LinearDef::Source& s : def.sources) {
      auto u = std::make_shared<Int4Unpacked>(unpack_awq_source(weights, def, s));
      cpu::AwqWeight aw;
      aw.qweight = int4_qweight(weights, def, s).as<int32_t>();
      aw.n = def.source_rows(s);
      aw.k = def.in;
      aw.group_size = def.quant.group_size;
      aw.scales = u->scales.data();
      aw.zeros = u->zeros.data();
      parts.push_back(
          {def.source_offset(s), aw.n,
           [aw](int64_t r0, int64_t r1, float* dst) { cpu::dequantize_rows(aw, r0, r1, dst); }, u});
    }
    return std::make_unique<DequantCpuLinear>(def, std::move(parts), stacked_bias(def, weights),
                                              DequantCpuLinear::Prepare{});
  }
};

}  // namespace

Int4Unpacked unpack_gptq_source(const WeightStore& weights, const LinearDef& def,
                                const LinearDef::Source& s) {
  const QuantParams& q = def.quant;
  const int pack = 32 / q.bits;
  const uint32_t mask = (1u << q.bits) - 1;
  require_divisible(weights, def, "input features", def.in, q.group_size);
  require_divisible(weights, def, "input features", def.in, pack);
  const int64_t groups = def.in / q.group_size;
  const int64_t rows = def.source_rows(s);
  require_divisible(weights, def, s.prefix + " rows", rows, pack);
  const Tensor& qzeros = checked_quant_tensor(weights, s.prefix + ".qzeros",
                                              {Shape{groups, rows / pack}}, {DType::kI32}, def);
  Int4Unpacked u;
  u.scales = float_values(checked_quant_tensor(weights, s.prefix + ".scales", {Shape{groups, rows}},
                                               kScaleDtypes, def));
  u.zeros.resize(static_cast<size_t>(groups * rows));
  const uint32_t mid = 1u << (q.bits - 1);
  bool warned = false;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < rows; ++j) {
      const auto word = static_cast<uint32_t>(qzeros.as<int32_t>()[g * (rows / pack) + j / pack]);
      const auto stored = static_cast<int32_t>((word >> ((j % pack) * q.bits)) & mask);
      int32_t zero = stored + (q.gptq_zero_plus_one ? 1 : 0);
      if (q.symmetric && zero != static_cast<int32_t>(mid)) {
        // vLLM's gptq_marlin reads a symmetric checkpoint's zero point as 2^(bits - 1) whatever
        // qzeros holds; so does pagoda, saying so once per tensor.
        if (!warned) {
          spdlog::warn(
              "{}: '{}.qzeros' group {} row {} holds zero point {}, but sym is true: using {} as "
              "vLLM does (is checkpoint_format gptq / gptq_v2 right?)",
              weights.source_of(s.prefix + ".qzeros"), s.prefix, g, j, zero, mid);
          warned = true;
        }
        zero = static_cast<int32_t>(mid);
      }
      u.zeros[static_cast<size_t>(g * rows + j)] = zero;
    }
  }
  u.g_idx.resize(static_cast<size_t>(def.in));
  const std::string g_name = s.prefix + ".g_idx";
  if (weights.contains(g_name)) {
    const Tensor& g_idx =
        checked_quant_tensor(weights, g_name, {Shape{def.in}}, {DType::kI32}, def);
    for (int64_t l = 0; l < def.in; ++l) {
      const int32_t g = g_idx.as<int32_t>()[l];
      const bool ok = g >= 0 && g < groups && (q.desc_act || g == l / q.group_size);
      if (!ok) {
        throw InvalidArgument(fmt::format(
            "{}: '{}' entry {} is {}: expected {} ({})", weights.source_of(g_name), g_name, l, g,
            q.desc_act ? fmt::format("a group in [0, {})", groups)
                       : fmt::format("{} (desc_act is false)", l / q.group_size),
            "GPTQ act-order"));
      }
      u.g_idx[static_cast<size_t>(l)] = g;
    }
  } else if (q.desc_act) {
    throw InvalidArgument(fmt::format("{}: tensor '{}' is missing (desc_act is true)",
                                      weights.description(), g_name));
  } else {
    for (int64_t l = 0; l < def.in; ++l)
      u.g_idx[static_cast<size_t>(l)] = static_cast<int32_t>(l / q.group_size);
  }
  return u;
}

Int4Unpacked unpack_awq_source(const WeightStore& weights, const LinearDef& def,
                               const LinearDef::Source& s) {
  const int64_t group = def.quant.group_size;
  require_divisible(weights, def, "input features", def.in, group);
  const int64_t groups = def.in / group;
  const int64_t rows = def.source_rows(s);
  require_divisible(weights, def, s.prefix + " rows", rows, 8);
  const Tensor& qzeros = checked_quant_tensor(weights, s.prefix + ".qzeros",
                                              {Shape{groups, rows / 8}}, {DType::kI32}, def);
  Int4Unpacked u;
  u.scales = float_values(checked_quant_tensor(weights, s.prefix + ".scales", {Shape{groups, rows}},
                                               kScaleDtypes, def));
  u.zeros.resize(static_cast<size_t>(groups * rows));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < rows; ++j) {
      const auto word = static_cast<uint32_t>(qzeros.as<int32_t>()[g * (rows / 8) + j / 8]);
      u.zeros[static_cast<size_t>(g * rows + j)] =
          static_cast<int32_t>((word >> (4 * cpu::kAwqReverseOrder[j % 8])) & 0xfu);
    }
  }
  return u;
}

const Tensor& int4_qweight(const WeightStore& weights, const LinearDef& def,
                           const LinearDef::Source& s) {
  const int64_t rows = def.source_rows(s);
  const Shape shape = def.format == WeightFormat::kAwq
                          ? Shape{def.in, rows / 8}
                          : Shape{def.in / (32 / def.quant.bits), rows};
  return checked_quant_tensor(weights, s.prefix + ".qweight", {shape}, {DType::kI32}, def);
}

const LinearMethod& gptq_linear_method() {
  static const GptqMethod m;
  return m;
}
const LinearMethod& awq_linear_method() {
  static const AwqMethod m;
  return m;
}

}  // namespace pagoda
