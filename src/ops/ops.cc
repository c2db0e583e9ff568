#include "ops/ops.h"

#include <cmath>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/kv_cache_codes.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"

namespace pagoda::ops {
namespace {

void expect(const Tensor& t, DType dtype, int rank, const char* what) {
  PAGODA_CHECK(t.dtype == dtype, "{}: dtype {} != {}", what, dtype_name(t.dtype),
               dtype_name(dtype));
  PAGODA_CHECK(t.shape.rank() == rank, "{}: shape {} is not rank {}", what, t.shape.to_string(),
               rank);
  PAGODA_CHECK(t.device == Device::kCPU, "{}: only the CPU backend exists so far", what);
}

/// Rows and columns of a tensor seen as a matrix over its last dimension.
int64_t rows_of(const Tensor& t) { return t.num_elements() / t.shape[t.shape.rank() - 1]; }
int64_t cols_of(const Tensor& t) { return t.shape[t.shape.rank() - 1]; }

}  // namespace

void linear(const OpContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias,
            const Tensor& y) {
  expect(x, DType::kF32, 2, "linear x");
  expect(y, DType::kF32, 2, "linear y");
  PAGODA_CHECK(is_float_weight_dtype(w.dtype) && w.shape.rank() == 2, "linear w: {} {}",
               dtype_name(w.dtype), w.shape.to_string());
  const int64_t m = x.shape[0], k = x.shape[1], n = w.shape[0];
  PAGODA_CHECK(w.shape[1] == k && y.shape[0] == m && y.shape[1] == n, "linear: x {} w {} y {}",
               x.shape.to_string(), w.shape.to_string(), y.shape.to_string());
  if (bias != nullptr) {
    expect(*bias, DType::kF32, 1, "linear bias");
    PAGODA_CHECK(bias->shape[0] == n, "linear bias {} for n={}", bias->shape.to_string(), n);
  }
  cpu::linear(x.as<float>(), m, k, w.data, w.dtype, n, bias ? bias->as<float>() : nullptr,
              y.as<float>(), *ctx.pool, ctx.linear);
}

void rms_norm(const OpContext& ctx, const Tensor& x, const Tensor& weight, float eps,
              const Tensor& out) {
  PAGODA_CHECK(x.dtype == DType::kF32 && out.dtype == DType::kF32 && x.shape == out.shape,
               "rms_norm x {} out {}", x.shape.to_string(), out.shape.to_string());
  expect(weight, DType::kF32, 1, "rms_norm weight");
  PAGODA_CHECK(weight.shape[0] == cols_of(x), "rms_norm weight {} for x {}",
               weight.shape.to_string(), x.shape.to_string());
  cpu::rms_norm(x.as<float>(), weight.as<float>(), rows_of(x), cols_of(x), eps, out.as<float>(),
                *ctx.pool);
}

void add_rms_norm(const OpContext& ctx, const Tensor& residual, const Tensor& x,
                  const Tensor& weight, float eps, const Tensor& out) {
  PAGODA_CHECK(residual.shape == x.shape && x.shape == out.shape && residual.dtype == DType::kF32 &&
                   x.dtype == DType::kF32 && out.dtype == DType::kF32,
               "add_rms_norm residual {} x {} out {}", residual.shape.to_string(),
               x.shape.to_string(), out.shape.to_string());
  expect(weight, DType::kF32, 1, "add_rms_norm weight");
  PAGODA_CHECK(weight.shape[0] == cols_of(x), "add_rms_norm weight {}", weight.shape.to_string());
  cpu::add_rms_norm(residual.as<float>(), x.as<float>(), weight.as<float>(), rows_of(x), cols_of(x),
                    eps, out.as<float>(), *ctx.pool);
}

void rope(const OpContext& ctx, const Tensor& q, const Tensor& k, const Tensor& positions,
          const Tensor& inv_freq) {
  expect(q, DType::kF32, 3, "rope q");
  expect(k, DType::kF32, 3, "rope k");
  expect(positions, DType::kI32, 1, "rope positions");
  expect(inv_freq, DType::kF32, 1, "rope inv_freq");
  const int64_t tokens = q.shape[0];
  const int head_dim = static_cast<int>(q.shape[2]);
  PAGODA_CHECK(k.shape[0] == tokens && k.shape[2] == head_dim && positions.shape[0] == tokens &&
                   inv_freq.shape[0] * 2 == head_dim,
               "rope q {} k {} positions {} inv_freq {}", q.shape.to_string(), k.shape.to_string(),
               positions.shape.to_string(), inv_freq.shape.to_string());
  cpu::rope_neox(q.as<float>(), k.as<float>(), positions.as<int32_t>(), tokens,
                 static_cast<int>(q.shape[1]), static_cast<int>(k.shape[1]), head_dim,
                 inv_freq.as<float>(), *ctx.pool);
}

void silu_and_mul(const OpContext& ctx, const Tensor& gate, const Tensor& up, const Tensor& out) {
  PAGODA_CHECK(gate.shape == up.shape && up.shape == out.shape && gate.dtype == DType::kF32 &&
                   up.dtype == DType::kF32 && out.dtype == DType::kF32,
               "silu_and_mul gate {} up {} out {}", gate.shape.to_string(), up.shape.to_string(),
               out.shape.to_string());
  cpu::silu_and_mul(gate.as<float>(), up.as<float>(), gate.num_elements(), out.as<float>(),
                    *ctx.pool);
}

void gelu_tanh_and_mul(const OpContext& ctx, const Tensor& gate, const Tensor& up,
                       const Tensor& out) {
  PAGODA_CHECK(gate.shape == up.shape && up.shape == out.shape && gate.dtype == DType::kF32 &&
                   up.dtype == DType::kF32 && out.dtype == DType::kF32,
               "gelu_tanh_and_mul gate {} up {} out {}", gate.shape.to_string(),
               up.shape.to_string(), out.shape.to_string());
  cpu::gelu_tanh_and_mul(gate.as<float>(), up.as<float>(), gate.num_elements(), out.as<float>(),
                         *ctx.pool);
}

void softcap(const OpContext& ctx, const Tensor& x, float cap) {
  PAGODA_CHECK(x.dtype == DType::kF32 && x.device == Device::kCPU && cap > 0, "softcap x {} cap {}",
               dtype_name(x.dtype), cap);
  cpu::softcap(x.as<float>(), x.num_elements(), cap, *ctx.pool);
}

void scale(const OpContext& ctx, const Tensor& x, float factor) {
  PAGODA_CHECK(x.dtype == DType::kF32 && x.device == Device::kCPU, "scale x {}",
               dtype_name(x.dtype));
  cpu::scale(x.as<float>(), x.num_elements(), factor, *ctx.pool);
}

void embedding(const OpContext& ctx, const Tensor& ids, const Tensor& table, const Tensor& out) {
  expect(ids, DType::kI32, 1, "embedding ids");
  expect(out, DType::kF32, 2, "embedding out");
  PAGODA_CHECK(is_float_weight_dtype(table.dtype) && table.shape.rank() == 2, "embedding table {}",
               table.shape.to_string());
  const int64_t vocab = table.shape[0], hidden = table.shape[1], tokens = ids.shape[0];
  PAGODA_CHECK(out.shape[0] == tokens && out.shape[1] == hidden, "embedding out {}",
               out.shape.to_string());
  const int32_t* id = ids.as<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    if (id[t] < 0 || id[t] >= vocab) {
      throw InvalidArgument(
          fmt::format("token id {} is outside the vocabulary [0, {})", id[t], vocab));
    }
  }
  cpu::embedding(id, tokens, table.data, table.dtype, hidden, out.as<float>(), *ctx.pool);
}

void reshape_and_cache(const OpContext& ctx, const Tensor& k, const Tensor& v,
                       const Tensor& slot_mapping, const Tensor& key_cache,
                       const Tensor& value_cache, const cpu::PagedKVLayout& layout,
                       cpu::KVScales scales) {
  expect(k, DType::kF32, 3, "reshape_and_cache k");
  expect(v, DType::kF32, 3, "reshape_and_cache v");
  expect(slot_mapping, DType::kI64, 1, "reshape_and_cache slot_mapping");
  PAGODA_CHECK(k.shape == v.shape && k.shape[0] == slot_mapping.shape[0] &&
                   k.shape[1] == layout.num_kv_heads && k.shape[2] == layout.head_dim,
               "reshape_and_cache k {} v {} slots {}", k.shape.to_string(), v.shape.to_string(),
               slot_mapping.shape.to_string());
  PAGODA_CHECK(key_cache.dtype == layout.dtype && value_cache.dtype == layout.dtype &&
                   cpu::kv_cache_dtype_supported(layout.dtype),
               "reshape_and_cache: caches of {} and {} for a layout of {}",
               dtype_name(key_cache.dtype), dtype_name(value_cache.dtype),
               dtype_name(layout.dtype));
  PAGODA_CHECK(scales.k > 0 && scales.v > 0 && std::isfinite(scales.k) && std::isfinite(scales.v),
               "reshape_and_cache: KV scales {} {}", scales.k, scales.v);
  const int64_t num_slots = layout.num_blocks * layout.block_size;
  const int64_t* slots = slot_mapping.as<int64_t>();
  for (int64_t t = 0; t < k.shape[0]; ++t) {
    PAGODA_CHECK(slots[t] < num_slots, "slot {} of token {} is past the cache ({} slots)", slots[t],
                 t, num_slots);
  }
  const cpu::KVCacheWrite write{k.as<float>(),  v.as<float>(),    slots,  k.shape[0],
                                key_cache.data, value_cache.data, layout, scales};
  cpu::reshape_and_cache(write, *ctx.pool);
}

void paged_attention(const OpContext& ctx, const cpu::PagedAttentionParams& params) {
  PAGODA_CHECK(params.layout.num_kv_heads > 0 && params.num_heads % params.layout.num_kv_heads == 0,
               "paged_attention: {} query heads for {} kv heads", params.num_heads,
               params.layout.num_kv_heads);
  PAGODA_CHECK(params.num_seqs >= 0 && params.query_start_loc != nullptr,
               "paged_attention: no batch");
  PAGODA_CHECK(params.query_start_loc[params.num_seqs] == params.num_tokens,
               "paged_attention: query_start_loc ends at {} for {} tokens",
               params.query_start_loc[params.num_seqs], params.num_tokens);
  PAGODA_CHECK(cpu::kv_cache_dtype_supported(params.layout.dtype),
               "paged_attention: a KV cache of {}", dtype_name(params.layout.dtype));
  cpu::paged_attention(params, *ctx.pool);
}

}  // namespace pagoda::ops
