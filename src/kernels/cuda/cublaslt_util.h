#pragma once
// Host helpers shared by the cuBLASLt paths (linear.cu, linear_fp8.cu, linear_int8.cu): the status
// mapping, an early-return check, and the heuristic's first algorithm for a planned shape.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "kernels/cuda/linear.h"

namespace pagoda::cuda::lt {

/// cuBLAS's status as a CUDA error: NOT_SUPPORTED stays "not supported" (callers fall back).
inline cudaError_t from_cublas(cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return cudaSuccess;
  return s == CUBLAS_STATUS_NOT_SUPPORTED ? cudaErrorNotSupported : cudaErrorUnknown;
}

/// The heuristic's first algorithm for D = op(A) op(B) (C = D) within ctx's workspace; an
/// unsupported layout or scale mode is cudaErrorNotSupported whatever status cuBLASLt gives.
inline cudaError_t first_algo(const BlasContext& ctx, cublasLtMatmulDesc_t op,
                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                              cublasLtMatrixLayout_t d, cublasLtMatmulAlgo_t* algo) {
  cublasLtMatmulPreference_t pref = nullptr;
  if (const cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref); s != CUBLAS_STATUS_SUCCESS)
    return from_cublas(s);
  const uint64_t ws = ctx.workspace_bytes;
  cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(ctx.handle, op, a, b, d, d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0) return cudaErrorNotSupported;
  *algo = result.algo;
  return cudaSuccess;
}

}  // namespace pagoda::cuda::lt

/// Returns the call's status as a cudaError_t from the enclosing function unless it succeeded.
#define PAGODA_LT(call)                                                                    \
  do {                                                                                     \
    const cublasStatus_t status_ = (call);                                                 \
    if (status_ != CUBLAS_STATUS_SUCCESS) return ::pagoda::cuda::lt::from_cublas(status_); \
  } while (0)
