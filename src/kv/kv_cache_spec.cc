#include "kv/kv_cache_spec.h"

#include <limits>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::kv {

std::optional<DType> parse_kv_cache_dtype(const std::string& name) {
  if (name == "auto") return std::nullopt;
  if (name == "fp8" || name == "fp8_e4m3") return DType::kF8E4M3;
  if (name == "fp8_e5m2") return DType::kF8E5M2;
  if (name == "int8") return DType::kI8;
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16") return DType::kF16;
  if (name == "fp8_inc" || name == "fp8_ds_mla") {
    throw InvalidArgument(fmt::format(
        "--kv-cache-dtype {}: not supported by pagoda ({}); use fp8, fp8_e4m3, fp8_e5m2 or int8",
        name, name == "fp8_inc" ? "Intel Gaudi's FP8" : "DeepSeek MLA's FP8 layout"));
  }
  throw InvalidArgument(
      fmt::format("--kv-cache-dtype '{}' must be auto, fp8, fp8_e4m3, fp8_e5m2, int8, bfloat16 or "
                  "float16",
                  name));
}

std::string kv_cache_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF8E4M3:
      return "fp8_e4m3";
    case DType::kF8E5M2:
      return "fp8_e5m2";
    case DType::kI8:
      return "int8";
    default:
      return std::string(dtype_name(dtype));
  }
}

int64_t KVCacheSpec::element_bytes() const { return static_cast<int64_t>(dtype_size(dtype)); }

int64_t KVCacheSpec::token_bytes_per_layer() const {
  return int64_t{num_kv_heads} * head_dim * element_bytes();
}

int64_t KVCacheSpec::bytes_per_token() const {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0 || element_bytes() <= 0) {
    throw InvalidArgument(fmt::format(
        "KV cache shape must be positive: num_layers={} num_kv_heads={} head_dim={} dtype={}",
        num_layers, num_kv_heads, head_dim, dtype_name(dtype)));
  }
  int64_t bytes = 2;  // K and V
  for (const int64_t factor :
       {int64_t{num_layers}, int64_t{num_kv_heads}, int64_t{head_dim}, element_bytes()}) {
    if (bytes > std::numeric_limits<int64_t>::max() / factor) {
      throw InvalidArgument("KV cache bytes per token overflow 64 bits");
    }
    bytes *= factor;
  }
  return bytes;
}

int64_t KVCacheSpec::layer_block_bytes(int block_size) const {
  return int64_t{block_size} * token_bytes_per_layer();
}

int64_t KVCacheSpec::block_bytes(int block_size) const {
  return int64_t{block_size} * bytes_per_token();
}

int64_t KVCacheSpec::offset(int64_t block, int slot, int head, int block_size) const {
  if (layout == KVLayout::kTokenMajor)
    return ((block * block_size + slot) * num_kv_heads + head) * int64_t{head_dim};
  return ((block * num_kv_heads + head) * block_size + slot) * int64_t{head_dim};
}

}  // namespace pagoda::kv
