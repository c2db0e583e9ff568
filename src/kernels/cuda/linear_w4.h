#pragma once
// 4-bit GPTQ / AWQ projections on the GPU (W4A16): y = x W^T (+ bias), x and y bf16/f16, W in the
// W4 layout (kernels/cpu/int4_repack.h, built on the host at load):
//   qweight  uint32 [n, k / 8]   row j's codes along k, element i in nibble i % 8 of word i / 8
//   meta     uint32 [n, groups]  fp16 scale (bits 0..15) | zero point (bits 16..23) per group
//   perm     int32  [k] or null  act-order: position i of a row holds input feature perm[i]
// w = scale * (q - zero), accumulated in fp32.
//
//   m <= kW4GemvMaxM   linear_w4_gemv: codes dequantized in registers, W read once (decode), with
//                      the fusions of linear_gemv_fused; with a permutation, x (normalised first
//                      when fused with the norm) is gathered into a scratch row by perm first.
//   m <= kW4ChunkedMaxM  the GEMV over blocks of kW4GemvMaxM rows of x (W read once per block:
//                      4 blocks read 2 bytes per weight, less than the path below moves).
//   larger m           first step, labelled as such: dequantize_w4 expands W into a dense scratch
//                      [n, k] in the activation dtype (in the features' original order, so x needs
//                      no gather), then the dense linear() (cuBLASLt). Correct, not Marlin-fast.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/linear.h"

namespace pagoda::cuda {

/// A W4 weight on the device (the layout above); bias [n] in the activation dtype or null.
struct W4WeightView {
  const uint32_t* qweight = nullptr;  // [n, k / 8], 16-byte aligned
  const uint32_t* meta = nullptr;     // [n, k / group_size]
  const int32_t* perm = nullptr;      // [k] or null
  const void* bias = nullptr;
  int64_t n = 0, k = 0, group_size = 0;
};

/// The GEMV reads one 16-byte chunk (32 codes) of a row at a time, all in one group: k and the
/// group size must be multiples of this.
inline constexpr int64_t kW4Chunk = 32;
/// m up to this runs the GEMV (the decode graphs' fused buckets).
inline constexpr int64_t kW4GemvMaxM = 8;
/// linear_w4 runs the GEMV kW4GemvMaxM rows at a time up to this m (batched decode).
inline constexpr int64_t kW4ChunkedMaxM = 32;

/// Whether w is a shape and alignment the kernels take: k % 32 == 0, group_size % 32 == 0,
/// k % group_size == 0, qweight 16-byte aligned, meta present.
[[nodiscard]] bool w4_view_valid(const W4WeightView& w);

/// y[m, n] = x W^T + bias with the fusions of GemvFusion (norm on x, residual accumulate,
/// SiLU-and-mul over [gate; up], RoPE + cache write), x [m, k] and y [m, n] in dtype. Needs
/// 1 <= m <= kW4GemvMaxM, w4_view_valid(w), x 16-byte aligned and GemvFusion's own requirements;
/// with w.perm, x_scratch [m, k] in dtype (16-byte aligned) receives the gathered x. y must not
/// alias x, w or x_scratch. cudaErrorInvalidValue otherwise.
cudaError_t linear_w4_gemv(const void* x, int64_t m, const W4WeightView& w, void* y,
                           const GemvFusion& fusion, void* x_scratch, DType dtype,
                           cudaStream_t stream);

/// dense[j, perm[i]] = scale * (q - zero) of position i of row j (perm absent: i), rounded once to
/// dtype: W [n, k] row-major in the features' original order.
cudaError_t dequantize_w4(const W4WeightView& w, void* dense, DType dtype, cudaStream_t stream);

/// out[r, i] = x[r, perm[i]] for r < m, i < k (a row gather of the columns); with norm_weight
/// non-null, of the RMS-normalised x: x[r, l] / rms(x[r]) * norm_weight[l], l = perm[i], rounded
/// once to dtype (rms over the row's k elements, eps norm_eps). Any m, k >= 1.
cudaError_t gather_columns(const void* x, int64_t m, int64_t k, const int32_t* perm,
                           const void* norm_weight, float norm_eps, void* out, DType dtype,
                           cudaStream_t stream);

/// Random codes for --load-format dummy: `words` uint32 from splitmix64(seed + i), every nibble
/// uniform in 0..15.
cudaError_t fill_random_words(uint32_t* dst, int64_t words, uint64_t seed, cudaStream_t stream);

/// One W4 projection as the model runs it.
struct W4LinearParams {
  const void* x = nullptr;  // [m, k] in dtype
  int64_t m = 0;
  W4WeightView w;
  void* y = nullptr;  // [m, n] in dtype
  DType dtype = DType::kBF16;
  void* x_scratch = nullptr;  // [kW4GemvMaxM, k] in dtype; needed when w.perm is set
  void* dense = nullptr;      // [n, k] in dtype: the large-m path's dequantized W
};

/// The dispatch described at the top: the GEMV (no fusion) for m <= kW4ChunkedMaxM, 8 rows at a
/// time, else dequantize_w4 into p.dense and cuBLASLt (linear_fallback where it has no algorithm).
cudaError_t linear_w4(const BlasContext& ctx, const W4LinearParams& p, cudaStream_t stream);

}  // namespace pagoda::cuda
