#pragma once
// INT8 W8A8 projections on the GPU (compressed-tensors int-quantized): weights int8 [n, k] with
// one fp32 scale per output row (a per-tensor scale repeated on its rows; a fused qkv keeps q's,
// k's and v's own scales), activations quantized to int8 per token (s = max|x| / 127) or by a
// static per-tensor scale, exact int32 products, bf16/f16 outputs:
//   y[i, j] = float(sum_l xq[i, l] * wq[j, l]) * x_scale[i] * w_scale[j] + bias[j]
// which is the CPU reference's function (kernels/cpu/quant_gemm.h, int8_matmul and
// quantize_int8_rows), codes bit for bit.
//
//   every m            quantize_int8_rows: x (RMS-normalised first when fused with the norm) ->
//                      xq int8 [m, k] + x_scale [m] fp32.
//   m <= kInt8GemvMaxM linear_int8_gemv: dp4a over int8 x int8, int32 sums, W read once (decode),
//                      with the epilogue fusions of linear_gemv_fused (residual accumulate,
//                      SiLU-and-mul, RoPE + cache write).
//   larger m           linear_int8_cublaslt: cuBLASLt's IMMA kernels (int8 x int8 -> int32, "TN":
//                      the weight stays [n, k] row-major as the checkpoint has it, which is the
//                      column-major k x n matrix op(A) = A^T that Hopper's int8 GEMMs take) into an
//                      int32 scratch, then int8_scale_epilogue writes y; shapes cuBLASLt refuses
//                      (k % 16 != 0, n % 4 != 0) run linear_int8_fallback, the same function.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/linear.h"

namespace pagoda::cuda {

/// An INT8 weight on the device: w [n, k] int8 row-major, scale [n] fp32; bias [n] in the
/// activation dtype or null.
struct Int8WeightView {
  const int8_t* w = nullptr;
  const float* scale = nullptr;
  const void* bias = nullptr;
  int64_t n = 0, k = 0;
};

/// What quantize_int8_rows reads and writes.
struct Int8QuantizeParams {
  const void* x = nullptr;  // [m, k] in dtype (bf16/f16), row-major
  int64_t m = 0, k = 0;
  // > 0: static per-tensor activations, q = rn(x / s), x_scale[i] = s. Else per token:
  // s = max|x| / 127, q = rn(x * (127 / max|x|)) (a zero row: q = 0, s = 0).
  float static_scale = 0.0f;
  // Non-null: the row is RMS-normalised first, x' = x * rsqrt(mean(x^2) + norm_eps) * norm_weight
  // (fp32, never rounded to dtype), and x' is quantized. norm_weight [k] in dtype.
  const void* norm_weight = nullptr;
  float norm_eps = 0.0f;
  int8_t* q = nullptr;       // [m, k]
  float* x_scale = nullptr;  // [m]
  DType dtype = DType::kBF16;
};

/// x -> q, x_scale as Int8QuantizeParams says. rn rounds half to even and saturates to
/// [-128, 127]; the divisions are IEEE: the CPU's codes and scales for the same fp32 x (without
/// the norm). Any m, k >= 1; no alignment needed.
cudaError_t quantize_int8_rows(const Int8QuantizeParams& p, cudaStream_t stream);

/// The GEMV handles up to this many rows of x (the decode graphs' fused buckets).
inline constexpr int64_t kInt8GemvMaxM = 8;

/// y[m, n] = the W8A8 product above of an already quantized x (xq [m, k], x_scale [m]), with the
/// epilogues of GemvFusion (kStore, kAccumulate, kGatedSilu, kRopeCache; the norm, which must be
/// applied before the quantization, is quantize_int8_rows' and must be null here). Needs
/// 1 <= m <= kInt8GemvMaxM, k % 8 == 0, xq and w 8-byte aligned (and the GemvFusion's own
/// requirements); cudaErrorInvalidValue otherwise. y must not alias xq or w.
cudaError_t linear_int8_gemv(const int8_t* xq, const float* x_scale, int64_t m,
                             const Int8WeightView& w, void* y, const GemvFusion& fusion,
                             DType dtype, cudaStream_t stream);

/// acc[m, n] int32 = xq w^T through cuBLASLt (exact). cuBLASLt errors map to
/// cudaErrorNotSupported (no algorithm; k % 16 != 0, n % 4 != 0, unaligned pointers) or
/// cudaErrorUnknown.
cudaError_t int8_gemm_cublaslt(const BlasContext& ctx, const int8_t* xq, int64_t m,
                               const Int8WeightView& w, int32_t* acc, cudaStream_t stream);

/// y[i, j] = float(acc[i, j]) * x_scale[i] * w.scale[j] + bias[j], rounded once to dtype;
/// acc [m, n] int32, y [m, n] in dtype.
cudaError_t int8_scale_epilogue(const int32_t* acc, const float* x_scale, int64_t m,
                                const Int8WeightView& w, void* y, DType dtype, cudaStream_t stream);

/// The whole product for any shape (tests, and shapes cuBLASLt refuses): a warp per output.
cudaError_t linear_int8_fallback(const int8_t* xq, const float* x_scale, int64_t m,
                                 const Int8WeightView& w, void* y, DType dtype,
                                 cudaStream_t stream);

/// Rows of x per cuBLASLt call in linear_int8: the int32 scratch holds this many rows of the
/// widest output (Llama-8B's gate_up: 1024 x 28672 x 4 bytes = 117 MB).
inline constexpr int64_t kInt8GemmRows = 1024;

/// One INT8 projection as the model runs it.
struct Int8LinearParams {
  const void* x = nullptr;  // [m, k] in dtype
  int64_t m = 0;
  Int8WeightView w;
  void* y = nullptr;  // [m, n] in dtype
  DType dtype = DType::kBF16;
  float input_scale = 0.0f;  // > 0: a static per-tensor input scale, else per token
  int8_t* xq = nullptr;      // scratch [m, k]
  float* x_scale = nullptr;  // scratch [m]
  int32_t* acc = nullptr;    // scratch [min(m, kInt8GemmRows), n] (m > kInt8GemvMaxM only)
};

/// The dispatch described at the top: quantize x into the scratch, then the GEMV (no fusion) for
/// m <= kInt8GemvMaxM where it is legal, else cuBLASLt + the scale epilogue kInt8GemmRows rows at
/// a time (the fallback where cuBLASLt has no algorithm).
cudaError_t linear_int8(const BlasContext& ctx, const Int8LinearParams& p, cudaStream_t stream);

}  // namespace pagoda::cuda
