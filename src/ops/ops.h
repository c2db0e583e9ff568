#pragma once
// Ops: shape and dtype checks on Tensors, then dispatch to the kernel for the tensors' device.
// Activations are fp32 [rows, features]; weights keep their checkpoint dtype.
#include "core/tensor.h"
#include "kernels/cpu/paged_attention.h"
#include "ops/op_context.h"

namespace pagoda::ops {

/// y = x · wᵀ (+ bias). x [m, k] f32, w [n, k] f32/bf16/f16, bias [n] f32 or null, y [m, n] f32.
void linear(const OpContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias,
            const Tensor& y);

/// out = rms_norm(x) * weight over the last dimension. x, out [rows, n] f32; weight [n] f32.
void rms_norm(const OpContext& ctx, const Tensor& x, const Tensor& weight, float eps,
              const Tensor& out);

/// residual += x; out = rms_norm(residual) * weight.
void add_rms_norm(const OpContext& ctx, const Tensor& residual, const Tensor& x,
                  const Tensor& weight, float eps, const Tensor& out);

/// Rotary embedding in place. q [tokens, heads, head_dim], k [tokens, kv_heads, head_dim] f32,
/// positions [tokens] i32, inv_freq [head_dim / 2] f32.
void rope(const OpContext& ctx, const Tensor& q, const Tensor& k, const Tensor& positions,
          const Tensor& inv_freq);

/// out = silu(gate) * up, elementwise; all f32 of one shape.
void silu_and_mul(const OpContext& ctx, const Tensor& gate, const Tensor& up, const Tensor& out);

/// out = gelu_tanh(gate) * up, elementwise; all f32 of one shape.
void gelu_tanh_and_mul(const OpContext& ctx, const Tensor& gate, const Tensor& up,
                       const Tensor& out);

/// x = cap * tanh(x / cap) in place (f32), cap > 0.
void softcap(const OpContext& ctx, const Tensor& x, float cap);

/// x *= factor in place (f32).
void scale(const OpContext& ctx, const Tensor& x, float factor);

/// out[t] = table[ids[t]]. ids [tokens] i32 (checked against the vocabulary), table [vocab,
/// hidden].
void embedding(const OpContext& ctx, const Tensor& ids, const Tensor& table, const Tensor& out);

/// Writes k and v [tokens, kv_heads, head_dim] f32 into the paged caches at slot_mapping [tokens]
/// i64, quantized to the caches' dtype (layout.dtype) with the layer's scales.
void reshape_and_cache(const OpContext& ctx, const Tensor& k, const Tensor& v,
                       const Tensor& slot_mapping, const Tensor& key_cache,
                       const Tensor& value_cache, const cpu::PagedKVLayout& layout,
                       cpu::KVScales scales = {});

/// Paged attention over a flat varlen batch; see cpu::PagedAttentionParams.
void paged_attention(const OpContext& ctx, const cpu::PagedAttentionParams& params);

}  // namespace pagoda::ops
