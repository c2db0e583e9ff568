// int8_gemm_cublaslt: the W8A8 INT8 GEMM through cuBLASLt's IMMA kernels (int8 x int8, int32
// accumulation and output: exact), before int8_scale_epilogue applies the scales (quant_int8.cu).
//
// How it works. As in linear_fp8.cu, the row-major acc[m, n] = xq[m, k] w[n, k]^T is the
// column-major D[n, m] = A^T B with A = w read as a k x n matrix (op T, lda = k) and B = xq read as
// k x m (op N, ldb = k): the "TN" layout that cuBLASLt's int8 kernels take with the regular
// (column-major) ordering. So the checkpoint's [n, k] rows are already the layout cuBLASLt needs
// on Hopper, and the loader uploads them as they are (the COL32 / COL4_4R2_8C orderings of the
// Turing/Ampere IMMA kernels are not used). Compute type CUBLAS_COMPUTE_32I with int32 alpha = 1,
// beta = 0. Worked example: acc[2, 5] of a 4 x 8 product is D[5, 2], at acc + 2 * 8 + 5. Legal
// shapes: k % 16 == 0 (16-byte rows of A and B) and n % 4 == 0 (16-byte columns of D); anything
// else returns cudaErrorNotSupported, which linear_int8 answers with linear_int8_fallback.
//
// Descriptors and the heuristic's first choice are cached per (m, n, k), as the FP8 plans.
#include <map>
#include <memory>
#include <tuple>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublaslt_util.h"
#include "kernels/cuda/linear_int8.h"

namespace pagoda::cuda {
namespace {

struct Int8Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ready = false;  // the heuristic found an algorithm
  ~Int8Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

cudaError_t make_plan(const BlasContext& ctx, int64_t m, int64_t n, int64_t k, Int8Plan* plan) {
  PAGODA_LT(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32I, CUDA_R_32I));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  PAGODA_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                           sizeof(trans_a)));
  PAGODA_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                           sizeof(trans_b)));
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  PAGODA_LT(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_8I, u(k), u(n), k));
  PAGODA_LT(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_8I, u(k), u(m), k));
  PAGODA_LT(cublasLtMatrixLayoutCreate(&plan->d, CUDA_R_32I, u(n), u(m), n));
  if (const cudaError_t e = lt::first_algo(ctx, plan->op, plan->a, plan->b, plan->d, &plan->algo);
      e != cudaSuccess)
    return e;
  plan->ready = true;
  return cudaSuccess;
}

}  // namespace

struct Int8PlanCache {
  using Key = std::tuple<int64_t, int64_t, int64_t>;  // m, n, k
  // A shape without an algorithm is kept too (ready = false), so the fallback is chosen at once.
  std::map<Key, std::unique_ptr<Int8Plan>> plans;
};

Int8PlanCache* int8_plan_cache_new() { return new Int8PlanCache(); }
void int8_plan_cache_delete(Int8PlanCache* cache) { delete cache; }

cudaError_t int8_gemm_cublaslt(const BlasContext& ctx, const int8_t* xq, int64_t m,
                               const Int8WeightView& w, int32_t* acc, cudaStream_t stream) {
  if (m == 0 || w.n == 0) return cudaSuccess;
  if (m < 0 || w.n < 0 || w.k <= 0 || ctx.handle == nullptr || xq == nullptr || w.w == nullptr ||
      acc == nullptr)
    return cudaErrorInvalidValue;
  // Checked here rather than left to the heuristic, which may accept a shape its kernel cannot
  // address (16-byte alignment of every row and column start).
  if (w.k % 16 != 0 || w.n % 4 != 0 || !aligned16(xq) || !aligned16(w.w) || !aligned16(acc))
    return cudaErrorNotSupported;
  const Int8PlanCache::Key key{m, w.n, w.k};
  Int8Plan* plan = nullptr;
  std::unique_ptr<Int8Plan> uncached;
  if (ctx.int8_plans != nullptr) {
    auto it = ctx.int8_plans->plans.find(key);
    if (it == ctx.int8_plans->plans.end()) {
      auto made = std::make_unique<Int8Plan>();
      const cudaError_t e = make_plan(ctx, m, w.n, w.k, made.get());
      if (e != cudaSuccess && e != cudaErrorNotSupported) return e;
      it = ctx.int8_plans->plans.emplace(key, std::move(made)).first;
    }
    plan = it->second.get();
  } else {
    uncached = std::make_unique<Int8Plan>();
    const cudaError_t e = make_plan(ctx, m, w.n, w.k, uncached.get());
    if (e != cudaSuccess && e != cudaErrorNotSupported) return e;
    plan = uncached.get();
  }
  if (!plan->ready) return cudaErrorNotSupported;
  const int32_t alpha = 1, beta = 0;
  PAGODA_LT(cublasLtMatmul(ctx.handle, plan->op, &alpha, w.w, plan->a, xq, plan->b, &beta, acc,
                           plan->d, acc, plan->d, &plan->algo, ctx.workspace, ctx.workspace_bytes,
                           stream));
  return cudaGetLastError();
}

}  // namespace pagoda::cuda
