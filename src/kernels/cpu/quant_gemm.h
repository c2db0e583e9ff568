#pragma once
// The CPU products of quantized projections (the reference every quantized GPU kernel is tested
// against):
//  - dequant_matmul: any weight format that dequantizes exactly to fp32 (FP8, GPTQ/AWQ int4,
//    FP4). The weight is never widened whole: the format's DequantizeRows writes a tile of rows at
//    a time into a per-thread scratch, which the tile's products then read from cache, so the
//    memory held is the packed checkpoint's (memory-mapped, in place) and not a dense copy.
//  - int8_matmul: W8A8 int8, exact int32 accumulation (AVX-512 VNNI where the CPU has it).
//  - the activation quantizers of W8A8 (vLLM's formulas, quant_gemm.cc).
#include <cstdint>
#include <functional>

#include "core/thread_pool.h"

namespace pagoda::cpu {

/// Writes rows [r0, r1) of a weight W [n, k] as fp32 into dst [r1 - r0, k], row-major. Called
/// concurrently from the pool's threads for disjoint ranges.
using DequantizeRows = std::function<void(int64_t r0, int64_t r1, float* dst)>;

/// y[i, j] = sum_l x[i, l] * W[j, l] for i < m, j < n (fp32 accumulation), W from `rows`.
/// x [m, k] fp32; y [m, ldy] fp32, columns [0, n) written, must not alias x.
void dequant_matmul(const float* x, int64_t m, int64_t k, int64_t n, const DequantizeRows& rows,
                    float* y, int64_t ldy, ThreadPool& pool);

/// y[i, j] = float(sum_l qx[i, l] * qw[j, l]) * x_scale[i] * w_scale[j] (+ bias[j]), the int32
/// sum exact. qx [m, k] int8; qw [n, k] int8 row-major (in place); w_row_sums [n] = sum_l qw[j, l]
/// (the VNNI path multiplies unsigned x + 128 and subtracts 128 * w_row_sums[j]); bias [n] or
/// null; y [m, ldy] fp32, columns [0, n) written.
struct Int8MatmulParams {
  const int8_t* qx = nullptr;
  const float* x_scale = nullptr;
  int64_t m = 0;
  int64_t k = 0;
  const int8_t* qw = nullptr;
  const int32_t* w_row_sums = nullptr;
  const float* w_scale = nullptr;
  const float* bias = nullptr;
  int64_t n = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};
void int8_matmul(const Int8MatmulParams& p, ThreadPool& pool);

/// W8A8 int8 activations, symmetric, vLLM's kernels: with static_scale > 0, q = rn(x / s) and
/// x_scale = s; else per row s = max|x| / 127, q = rn(x * (127 / max|x|)) (a zero row: q = 0,
/// s = 0). rn rounds half to even; results saturate to [-128, 127]. qx [m, k], x_scale [m].
void quantize_int8_rows(const float* x, int64_t m, int64_t k, float static_scale, int8_t* qx,
                        float* x_scale);

/// W8A8 FP8 activations, returned dequantized (x_hat = e4m3(x / s) * s, what the GPU's product
/// sees), vLLM's kernels: static_scale > 0: s fixed; else per row and group of `group` features
/// (group = k: per token) s = max(max|x| / 448, 1 / (448 * 512)). x, out [m, k]; out may alias x.
void fake_quantize_fp8_rows(const float* x, int64_t m, int64_t k, float static_scale, int64_t group,
                            float* out);

}  // namespace pagoda::cpu
