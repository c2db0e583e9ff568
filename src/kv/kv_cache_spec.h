#pragma once
// KVCacheSpec: the one description of what the paged KV cache holds per token, in which element
// type and memory layout. The model reports it (from its definition and its device), the engine
// sizes the block pool from it, and each backend allocates and addresses its cache by it: the
// byte counts below are computed nowhere else.
#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace pagoda::kv {

/// How one layer's key (or value) cache is laid out in memory (block b, token slot o of the block,
/// KV head h, element i of the head).
enum class KVLayout : uint8_t {
  kTokenMajor,  // [num_blocks, block_size, num_kv_heads, head_dim] (the CPU cache)
  kHeadMajor,   // [num_blocks, num_kv_heads, block_size, head_dim] (the GPU cache)
};

/// The KV cache of one model (on one tensor-parallel rank).
struct KVCacheSpec {
  int num_layers = 0;
  int num_kv_heads = 0;  // on this rank
  int head_dim = 0;
  /// The cache's element type: on the CPU f32 (--kv-cache-dtype auto), bf16, f16, f8e4m3, f8e5m2
  /// or i8; on the GPU the activation dtype. The codes of f8e4m3, f8e5m2 and i8 are multiplied by
  /// a per-layer scale, which lives with the model's weights, not here.
  DType dtype = DType::kF32;
  KVLayout layout = KVLayout::kTokenMajor;
  /// -dcp D (model/context_parallel.h): this rank holds one of every D tokens of a sequence, so
  /// an engine block of block_size tokens is a block of block_size / D here. 1: every token.
  int decode_context_parallel = 1;

  /// Bytes of one element.
  [[nodiscard]] int64_t element_bytes() const;
  /// Bytes of one token's K or V in one layer: num_kv_heads * head_dim elements.
  [[nodiscard]] int64_t token_bytes_per_layer() const;
  /// Bytes of one token's K and V in every layer (what sizes the pool from a memory budget).
  /// InvalidArgument on a non-positive field or on overflow.
  [[nodiscard]] int64_t bytes_per_token() const;
  /// Bytes of one block's K (or V) in one layer: the unit of copies and transfers.
  [[nodiscard]] int64_t layer_block_bytes(int block_size) const;
  /// Bytes of one block's K and V in every layer.
  [[nodiscard]] int64_t block_bytes(int block_size) const;
  /// Element offset of (block, slot in block, kv head) in one layer's cache of this layout.
  /// Example (kHeadMajor, block_size 16, 8 heads, head_dim 128): block 3, slot 5, head 2 is at
  /// ((3 * 8 + 2) * 16 + 5) * 128 = 54,016.
  [[nodiscard]] int64_t offset(int64_t block, int slot, int head, int block_size) const;

  bool operator==(const KVCacheSpec&) const = default;
};

/// --kv-cache-dtype, vLLM's names: "auto" -> nullopt (the backend's dtype, or the one the
/// checkpoint's quantization asks for); "fp8" and "fp8_e4m3" -> f8e4m3, "fp8_e5m2" -> f8e5m2,
/// "int8" -> i8, "bfloat16" -> bf16, "float16" -> f16. InvalidArgument naming the flag and the
/// accepted names otherwise (vLLM's fp8_inc and fp8_ds_mla with their reason).
[[nodiscard]] std::optional<DType> parse_kv_cache_dtype(const std::string& name);

/// The name of a cache dtype in logs and metrics, as vLLM spells --kv-cache-dtype: "fp8_e4m3",
/// "fp8_e5m2", "int8", "bfloat16", "float16", "float32".
[[nodiscard]] std::string kv_cache_dtype_name(DType dtype);

/// Whether a cache of this dtype holds codes that a per-layer scale multiplies (fp8, int8).
[[nodiscard]] constexpr bool kv_cache_dtype_scaled(DType dtype) {
  return dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2 || dtype == DType::kI8;
}

}  // namespace pagoda::kv
