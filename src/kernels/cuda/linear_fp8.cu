// linear_fp8_cublaslt: the W8A8 GEMM through cuBLASLt (e4m3 x e4m3, fp32 accumulation, bf16/f16
// output), with the per-row scales of both operands applied by cuBLASLt itself.
//
// How it works. As in linear.cu, the row-major y[m, n] = xq[m, k] w[n, k]^T is the column-major
// D[n, m] = A^T B with A = w read as a k x n matrix (op T, lda = k) and B = xq read as k x m (op N,
// ldb = k): the "TN" layout that cuBLASLt's FP8 kernels require. cuBLAS's M is our n and its N our
// m, so CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on A takes the weight scales [n] and on B the
// token scales [m]: D[j, i] = a_scale[j] * b_scale[i] * sum_l A[l, j] B[l, i] (+ bias[j] from the
// bias epilogue, in D's type). Worked example: y[2, 5] of a 4 x 8 product is D[5, 2], at
// y + 2 * 8 + 5, scaled by w_scale[5] * x_scale[2]. Legal shapes: k % 16 == 0 (16-byte rows of A
// and B) and n % 8 == 0 (16-byte columns of D); anything else finds no algorithm and returns
// cudaErrorNotSupported, which linear_fp8 answers with linear_fp8_fallback.
//
// Descriptors and the heuristic's first choice are cached per (m, n, k, dtype, bias); the scale
// and bias pointers, which change from layer to layer, are set on the cached descriptor each call.
#include <map>
#include <memory>
#include <tuple>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublaslt_util.h"
#include "kernels/cuda/linear_fp8.h"

namespace pagoda::cuda {
namespace {

struct Fp8Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ready = false;  // the heuristic found an algorithm
  ~Fp8Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

/// The per-call pointers of a plan: the scales (A: weights [n], B: tokens [m]) and the bias.
cudaError_t set_pointers(const Fp8Plan& plan, const float* w_scale, const float* x_scale,
                         const void* bias) {
  PAGODA_LT(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale,
                                           sizeof(w_scale)));
  PAGODA_LT(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale,
                                           sizeof(x_scale)));
  if (bias != nullptr) {
    PAGODA_LT(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                             sizeof(bias)));
  }
  return cudaSuccess;
}

cudaError_t make_plan(const BlasContext& ctx, int64_t m, int64_t n, int64_t k, const float* w_scale,
                      const float* x_scale, const void* bias, cudaDataType_t dt_out,
                      Fp8Plan* plan) {
  PAGODA_LT(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  PAGODA_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                           sizeof(trans_a)));
  PAGODA_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                           sizeof(trans_b)));
  const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  PAGODA_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                           sizeof(mode)));
  PAGODA_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                           sizeof(mode)));
  if (bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    PAGODA_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                             sizeof(epilogue)));
    const int32_t bias_type = dt_out;
    PAGODA_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                             &bias_type, sizeof(bias_type)));
  }
  if (const cudaError_t e = set_pointers(*plan, w_scale, x_scale, bias); e != cudaSuccess) return e;
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  PAGODA_LT(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_8F_E4M3, u(k), u(n), k));
  PAGODA_LT(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_8F_E4M3, u(k), u(m), k));
  PAGODA_LT(cublasLtMatrixLayoutCreate(&plan->d, dt_out, u(n), u(m), n));
  if (const cudaError_t e = lt::first_algo(ctx, plan->op, plan->a, plan->b, plan->d, &plan->algo);
      e != cudaSuccess)
    return e;
  plan->ready = true;
  return cudaSuccess;
}

}  // namespace

struct Fp8PlanCache {
  using Key = std::tuple<int64_t, int64_t, int64_t, int, bool>;  // m, n, k, dtype, bias
  // A shape without an algorithm is kept too (ready = false), so the fallback is chosen at once.
  std::map<Key, std::unique_ptr<Fp8Plan>> plans;
};

Fp8PlanCache* fp8_plan_cache_new() { return new Fp8PlanCache(); }
void fp8_plan_cache_delete(Fp8PlanCache* cache) { delete cache; }

cudaError_t linear_fp8_cublaslt(const BlasContext& ctx, const uint8_t* xq, const float* x_scale,
                                int64_t m, const Fp8WeightView& w, void* y, DType dtype,
                                cudaStream_t stream) {
  if (m == 0 || w.n == 0) return cudaSuccess;
  if (m < 0 || w.n < 0 || w.k <= 0 || ctx.handle == nullptr || xq == nullptr ||
      x_scale == nullptr || w.w == nullptr || w.scale == nullptr || y == nullptr)
    return cudaErrorInvalidValue;
  if (dtype != DType::kBF16 && dtype != DType::kF16) return cudaErrorInvalidValue;
  // Checked here rather than left to the heuristic, which may accept a shape its kernel cannot
  // address (16-byte alignment of every row and column start).
  if (w.k % 16 != 0 || w.n % 8 != 0 || !aligned16(xq) || !aligned16(w.w) || !aligned16(y))
    return cudaErrorNotSupported;
  const cudaDataType_t dt_out = dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const Fp8PlanCache::Key key{m, w.n, w.k, static_cast<int>(dtype), w.bias != nullptr};
  Fp8Plan* plan = nullptr;
  std::unique_ptr<Fp8Plan> uncached;
  if (ctx.fp8_plans != nullptr) {
    auto it = ctx.fp8_plans->plans.find(key);
    if (it == ctx.fp8_plans->plans.end()) {
      auto made = std::make_unique<Fp8Plan>();
      const cudaError_t e =
          make_plan(ctx, m, w.n, w.k, w.scale, x_scale, w.bias, dt_out, made.get());
      if (e != cudaSuccess && e != cudaErrorNotSupported) return e;
      it = ctx.fp8_plans->plans.emplace(key, std::move(made)).first;
    }
    plan = it->second.get();
  } else {
    uncached = std::make_unique<Fp8Plan>();
    const cudaError_t e =
        make_plan(ctx, m, w.n, w.k, w.scale, x_scale, w.bias, dt_out, uncached.get());
    if (e != cudaSuccess && e != cudaErrorNotSupported) return e;
    plan = uncached.get();
  }
  if (!plan->ready) return cudaErrorNotSupported;
  if (const cudaError_t e = set_pointers(*plan, w.scale, x_scale, w.bias); e != cudaSuccess)
    return e;
  const float alpha = 1.0f, beta = 0.0f;
  PAGODA_LT(cublasLtMatmul(ctx.handle, plan->op, &alpha, w.w, plan->a, xq, plan->b, &beta, y,
                           plan->d, y, plan->d, &plan->algo, ctx.workspace, ctx.workspace_bytes,
                           stream));
  return cudaGetLastError();
}

}  // namespace pagoda::cuda
