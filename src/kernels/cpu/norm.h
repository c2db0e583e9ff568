#pragma once
// RMSNorm as Llama, Mistral and Qwen use it, computed in fp32.
#include <cstdint>

#include "core/thread_pool.h"

namespace pagoda::cpu {

/// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:] for r in [0, rows).
/// x, out: [rows, n] fp32 (out may equal x); weight: [n] fp32. With n = head_dim and
/// rows = tokens * heads this is also Qwen3's per-head q/k norm.
void rms_norm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* out,
              ThreadPool& pool);

/// Fused residual add + RMSNorm: residual += x, then out = rms_norm(residual).
/// residual, x, out: [rows, n] fp32; out must not alias residual.
void add_rms_norm(float* residual, const float* x, const float* weight, int64_t rows, int64_t n,
                  float eps, float* out, ThreadPool& pool);

}  // namespace pagoda::cpu
