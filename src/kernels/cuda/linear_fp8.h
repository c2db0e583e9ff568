#pragma once
// FP8 projections on the GPU: weights float8_e4m3fn with one fp32 scale per output row (a
// per-tensor scale repeated on its rows; a fused qkv keeps q's, k's and v's own scales), bf16/f16
// activations and outputs, fp32 accumulation.
//
//   m <= kFp8GemvMaxM   linear_fp8_gemv: weight-only (W8A16). W is read once as e4m3 and widened
//                       in registers; x stays bf16/f16; the fusions of linear_gemv_fused.
//   larger m            W8A8: quantize_fp8_rows quantizes x per token (or by a static scale), then
//                       linear_fp8_cublaslt (cuBLASLt e4m3 x e4m3 -> bf16/f16 with outer-vector
//                       scales: y[i, j] = x_scale[i] * w_scale[j] * dot + bias[j]), and where
//                       cuBLASLt has no algorithm for the shape (k % 16 != 0, odd n) the any-shape
//                       linear_fp8_fallback computes the same function.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/linear.h"

namespace pagoda::cuda {

/// How quantize_fp8_rows picks a row's scale s (q = e4m3(x / s), saturated to +-448).
enum class Fp8ScaleRule : uint8_t {
  // vLLM's dynamic per-token activation scale: s = max(max|x| / 448, 1 / (448 * 512)).
  kActivation,
  // --quantization fp8 at load (model/quant/fp8_int8_methods.cc): s = max|w| / 448, 1 for a zero
  // row.
  kWeight,
};

/// x [m, k] (dtype bf16/f16, row-major) -> q [m, k] e4m3 and scales [m] fp32. static_scale > 0:
/// every row uses it (static per-tensor activations; scales[i] = static_scale); else each row's
/// own scale by `rule`. The division is IEEE (x / s), the conversion rounds to nearest even and
/// saturates, as core/fp8.h's float_to_e4m3: the same codes as the CPU for the same x.
/// Any m, k >= 1; no alignment needed.
cudaError_t quantize_fp8_rows(const void* x, int64_t m, int64_t k, float static_scale,
                              Fp8ScaleRule rule, uint8_t* q, float* scales, DType dtype,
                              cudaStream_t stream);

/// An FP8 weight on the device: w [n, k] e4m3 row-major, scale [n] fp32; bias [n] in the
/// activation dtype or null.
struct Fp8WeightView {
  const uint8_t* w = nullptr;
  const float* scale = nullptr;
  const void* bias = nullptr;
  int64_t n = 0, k = 0;
};

/// The weight-only GEMV reaches W8A16's byte bound up to this m (8 = the decode graphs' fused
/// buckets); linear_fp8 routes larger m to the W8A8 GEMM.
inline constexpr int64_t kFp8GemvMaxM = 8;

/// y[m, n] = (x w^T) * scale[j] + bias[j], x [m, k] and y [m, n] in dtype, with the fusions of
/// GemvFusion (norm on x, residual accumulate, SiLU-and-mul over [gate; up], RoPE + cache write).
/// Needs 1 <= m <= kFp8GemvMaxM, k % 8 == 0, x 16-byte and w 8-byte aligned (and the
/// GemvFusion's own requirements); cudaErrorInvalidValue otherwise. y must not alias x or w.
cudaError_t linear_fp8_gemv(const void* x, int64_t m, const Fp8WeightView& w, void* y,
                            const GemvFusion& fusion, DType dtype, cudaStream_t stream);

/// W8A8 product of an already quantized x: y[i, j] = xq[i, :] . w[j, :] * x_scale[i] *
/// w.scale[j] + bias[j], xq [m, k] e4m3, x_scale [m] fp32, y [m, n] in dtype. cuBLASLt errors map
/// to cudaErrorNotSupported (no algorithm: k % 16 != 0, unaligned n) or cudaErrorUnknown.
cudaError_t linear_fp8_cublaslt(const BlasContext& ctx, const uint8_t* xq, const float* x_scale,
                                int64_t m, const Fp8WeightView& w, void* y, DType dtype,
                                cudaStream_t stream);

/// The same product for any shape (tests, and shapes cuBLASLt refuses): a warp per output.
cudaError_t linear_fp8_fallback(const uint8_t* xq, const float* x_scale, int64_t m,
                                const Fp8WeightView& w, void* y, DType dtype, cudaStream_t stream);

/// One FP8 projection as the model runs it.
struct Fp8LinearParams {
  const void* x = nullptr;  // [m, k] in dtype
  int64_t m = 0;
  Fp8WeightView w;
  void* y = nullptr;  // [m, n] in dtype
  DType dtype = DType::kBF16;
  // W8A8 (m > kFp8GemvMaxM): > 0 a static per-tensor input scale, else per token.
  float input_scale = 0.0f;
  // A weight-only checkpoint (no input quantization): every m runs the GEMV, kFp8GemvMaxM rows at
  // a time (exact to the checkpoint's W8A16 scheme, slow for prefill).
  bool weight_only = false;
  uint8_t* xq = nullptr;     // scratch [m, k] e4m3
  float* x_scale = nullptr;  // scratch [m] fp32
};

/// The dispatch described at the top: the GEMV (no fusion) for small m where it is legal (every m
/// when weight_only; then k % 8 == 0 and aligned x are required), else quantize x into the scratch
/// and run the W8A8 GEMM (cuBLASLt, else the fallback).
cudaError_t linear_fp8(const BlasContext& ctx, const Fp8LinearParams& p, cudaStream_t stream);

}  // namespace pagoda::cuda
