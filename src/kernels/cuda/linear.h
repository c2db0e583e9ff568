#pragma once
// Dense projections on the GPU: y = x w^T (+ bias) in bf16/f16 with fp32 accumulation.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace pagoda::cuda {

/// What cuBLASLt needs across calls: a handle and a device workspace. Owned by the caller (one per
/// device/stream); create with blas_context_create, free with blas_context_destroy.
struct LtPlanCache;
struct BlasContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // device memory, workspace_bytes long
  size_t workspace_bytes = 0;
  // Descriptors and heuristic choice per (m, n, k, dtype, bias): the heuristic query costs tens of
  // microseconds of host time, paid once per shape instead of on each of a step's 129 GEMMs.
  // Used by one thread at a time, as the stream is.
  LtPlanCache* plans = nullptr;
};

[[nodiscard]] cudaError_t blas_context_create(BlasContext* ctx, size_t workspace_bytes = 32u << 20);
void blas_context_destroy(BlasContext* ctx);

/// y[m, n] = sum_k x[m, k] * w[n, k] + bias[n], accumulated in fp32, rounded once to dtype.
/// x: [m, k] row-major; w: [n, k] row-major (a torch nn.Linear weight); bias: [n] or null;
/// y: [m, n] row-major, must not alias x or w. All in dtype (bf16 or f16), on the device.
/// w must not be written by the kernel just before this call in the stream: the GEMV requests its
/// first weights before waiting for that kernel (gemv.cu). Model weights are constant.
/// Small m (<= kGemvMaxM) with k % 8 == 0 and 16-byte aligned x, w runs linear_gemv (bandwidth-
/// bound: W is streamed once); everything else runs cuBLASLt, and where cuBLASLt finds no
/// algorithm for the shape (odd k or n of small models, unaligned rows) linear_fallback.
cudaError_t linear(const BlasContext& ctx, const void* x, int64_t m, int64_t k, const void* w,
                   int64_t n, const void* bias, void* y, DType dtype, cudaStream_t stream);

// Measured on the H200 (docs/benchmarks.md): our GEMV beats cuBLASLt at m = 1 on every Llama-8B
// shape (up to 97% of HBM bandwidth), cuBLASLt wins from m = 4 on. linear() routes m <= this to
// the GEMV; linear_gemv itself still accepts m up to 16.
inline constexpr int64_t kGemvMaxM = 1;
inline constexpr int64_t kGemvLimitM = 16;

/// The small-m path alone (for tests and benchmarks): needs 1 <= m <= kGemvLimitM, k % 8 == 0 and
/// x, w 16-byte aligned; otherwise returns cudaErrorInvalidValue.
cudaError_t linear_gemv(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                        const void* bias, void* y, DType dtype, cudaStream_t stream);

/// The cuBLASLt path alone (any shape). cuBLAS errors map to cudaErrorNotSupported (no algorithm)
/// or cudaErrorUnknown.
cudaError_t linear_cublaslt(const BlasContext& ctx, const void* x, int64_t m, int64_t k,
                            const void* w, int64_t n, const void* bias, void* y, DType dtype,
                            cudaStream_t stream);

/// The any-shape path alone (for tests): one warp per output element, fp32 accumulation, no
/// alignment or size requirement on k or n.
cudaError_t linear_fallback(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                            const void* bias, void* y, DType dtype, cudaStream_t stream);

}  // namespace pagoda::cuda
