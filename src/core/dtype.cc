#include "core/dtype.h"

namespace pagoda {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
    case DType::kI16:
      return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kF64:
      return "float64";
    case DType::kI64:
      return "int64";
    case DType::kI32:
      return "int32";
    case DType::kI16:
      return "int16";
    case DType::kI8:
      return "int8";
    case DType::kU8:
      return "uint8";
    case DType::kBool:
      return "bool";
    case DType::kF8E4M3:
      return "float8_e4m3fn";
    case DType::kF8E5M2:
      return "float8_e5m2";
  }
  return "unknown";
}

std::optional<DType> dtype_from_safetensors(std::string_view tag) {
  if (tag == "F32") return DType::kF32;
  if (tag == "BF16") return DType::kBF16;
  if (tag == "F16") return DType::kF16;
  if (tag == "F64") return DType::kF64;
  if (tag == "I64") return DType::kI64;
  if (tag == "I32") return DType::kI32;
  if (tag == "I16") return DType::kI16;
  if (tag == "I8") return DType::kI8;
  if (tag == "U8") return DType::kU8;
  if (tag == "BOOL") return DType::kBool;
  if (tag == "F8_E4M3") return DType::kF8E4M3;
  if (tag == "F8_E5M2") return DType::kF8E5M2;
  return std::nullopt;
}

std::optional<DType> dtype_from_torch_name(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  if (name == "float32" || name == "float") return DType::kF32;
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16" || name == "half") return DType::kF16;
  return std::nullopt;
}

}  // namespace pagoda
