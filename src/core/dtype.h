#pragma once
// Element types of tensors, weights and the KV cache.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pagoda {

/// The element type of a tensor. Packed 4-bit formats (GPTQ/AWQ int4 in I32 words, FP4 in U8
/// bytes) keep their container's type; their LinearMethod (model/quant/) knows the packing.
enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kF64,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kF8E4M3,  // float8_e4m3fn: 4 exponent bits (bias 7), 3 mantissa bits, no inf, max 448
  kF8E5M2,  // float8_e5m2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE inf/NaN, max 57344
};

[[nodiscard]] size_t dtype_size(DType dtype);
[[nodiscard]] std::string_view dtype_name(DType dtype);  // "float32", "bfloat16", ...

/// Parses a safetensors dtype tag ("F32", "BF16", ...); nullopt for tags pagoda cannot hold.
[[nodiscard]] std::optional<DType> dtype_from_safetensors(std::string_view tag);
/// Parses a torch dtype name as config.json spells it ("float32", "bfloat16", "float16", "half").
[[nodiscard]] std::optional<DType> dtype_from_torch_name(std::string_view name);

/// True for the floating types a weight matrix may have (f32, bf16, f16).
[[nodiscard]] constexpr bool is_float_weight_dtype(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

}  // namespace pagoda
