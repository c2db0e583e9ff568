// linear: the choice between our GEMV, cuBLASLt and the any-shape fallback, and the cuBLASLt
// call.
//
// cuBLASLt is column-major; a row-major y[m, n] = x[m, k] w[n, k]^T is the column-major
// y^T[n, m] = W^T x^T where w, read column-major, is the k x n matrix W^T: so A = w with op T
// (lda = k), B = x with op N (ldb = k), D = y (ldd = n). The bias epilogue adds bias[n] along D's
// rows, which are y's columns.
#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublaslt_util.h"
#include "kernels/cuda/linear.h"

namespace pagoda::cuda {
namespace {

// Owns the cuBLASLt descriptors of one call.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

/// One shape's descriptors and the algorithm the heuristic chose for it.
struct LtPlan {
  LtDescs descs;
  cublasLtMatmulAlgo_t algo{};
};

}  // namespace

struct LtPlanCache {
  using Key = std::tuple<int64_t, int64_t, int64_t, int, bool>;  // m, n, k, dtype, bias
  std::map<Key, std::unique_ptr<LtPlan>> plans;
  std::map<Key, int> choices;  // the timed (or given) candidate index per shape
  int timed_shapes = 0;
};

namespace {

/// Times each candidate on the call's operands (one warm-up run, then kTimedRuns between two
/// events on `stream`) and returns the index of the fastest; 0 when no candidate could be timed.
int fastest_candidate(const BlasContext& ctx, const LtDescs& s,
                      const cublasLtMatmulHeuristicResult_t* candidates, int count, const void* x,
                      const void* w, void* y, cudaStream_t stream) {
  constexpr int kTimedRuns = 3;
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    if (start != nullptr) cudaEventDestroy(start);
    return 0;
  }
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&](int i) {
    return cublasLtMatmul(ctx.handle, s.op, &alpha, w, s.a, x, s.b, &beta, y, s.d, y, s.d,
                          &candidates[i].algo, ctx.workspace, ctx.workspace_bytes,
                          stream) == CUBLAS_STATUS_SUCCESS;
  };
  int best = 0;
  float best_ms = 0.0f;
  for (int i = 0; i < count; ++i) {
    if (candidates[i].state != CUBLAS_STATUS_SUCCESS || !run(i)) continue;
    bool ok = cudaEventRecord(start, stream) == cudaSuccess;
    for (int r = 0; r < kTimedRuns && ok; ++r) ok = run(i);
    float ms = 0.0f;
    ok = ok && cudaEventRecord(stop, stream) == cudaSuccess &&
         cudaEventSynchronize(stop) == cudaSuccess &&
         cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
    if (ok && (best_ms == 0.0f || ms < best_ms)) {
      best = i;
      best_ms = ms;
    }
  }
  (void)cudaGetLastError();  // a candidate that failed to launch is not the call's error
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

/// Builds the descriptors of y[m, n] = x w^T (+ bias) and chooses an algorithm: the heuristic's
/// first, or the fastest of its first kTuneCandidates when ctx.tune_new_plans allows timing them
/// on this call's operands.
cudaError_t make_plan(const BlasContext& ctx, int64_t m, int64_t k, int64_t n, const void* bias,
                      cudaDataType_t dt, cudaDataType_t dt_out, const void* x, const void* w,
                      void* y, cudaStream_t stream, const LtPlanCache::Key& key, LtPlan* plan) {
  LtDescs& s = plan->descs;
  PAGODA_LT(cublasLtMatmulDescCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  PAGODA_LT(
      cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  PAGODA_LT(
      cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  if (bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    PAGODA_LT(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                             sizeof(epilogue)));
    PAGODA_LT(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                             sizeof(bias)));
  }
  PAGODA_LT(
      cublasLtMatrixLayoutCreate(&s.a, dt, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
  PAGODA_LT(
      cublasLtMatrixLayoutCreate(&s.b, dt, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k));
  PAGODA_LT(cublasLtMatrixLayoutCreate(&s.d, dt_out, static_cast<uint64_t>(n),
                                       static_cast<uint64_t>(m), n));
  PAGODA_LT(cublasLtMatmulPreferenceCreate(&s.pref));
  const uint64_t ws = ctx.workspace_bytes;
  PAGODA_LT(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof(ws)));
  // A known choice (timed earlier, or saved by an earlier start-up) is taken as it is.
  int known = -1;
  if (ctx.plans != nullptr) {
    const auto it = ctx.plans->choices.find(key);
    if (it != ctx.plans->choices.end()) known = it->second;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const bool tune = known < 0 && ctx.tune_new_plans && m <= kTuneMaxM &&
                    cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
                    capture == cudaStreamCaptureStatusNone;
  cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
  int found = 0;
  const int wanted = tune ? kTuneCandidates : known >= 0 ? std::min(known + 1, kTuneCandidates) : 1;
  PAGODA_LT(cublasLtMatmulAlgoGetHeuristic(ctx.handle, s.op, s.a, s.b, s.d, s.d, s.pref, wanted,
                                           results, &found));
  if (found == 0) return cudaErrorNotSupported;
  int chosen = 0;
  if (known >= 0 && known < found) {
    chosen = known;  // a stale index (another library's list) falls back to the first
  } else if (tune && found > 1) {
    chosen = fastest_candidate(ctx, s, results, found, x, w, y, stream);
    if (ctx.plans != nullptr) {
      ctx.plans->choices[key] = chosen;
      ++ctx.plans->timed_shapes;
    }
  }
  plan->algo = results[chosen].algo;
  return cudaSuccess;
}

}  // namespace

cudaError_t blas_context_create(BlasContext* ctx, size_t workspace_bytes) {
  *ctx = BlasContext{};
  if (const cudaError_t e = lt::from_cublas(cublasLtCreate(&ctx->handle)); e != cudaSuccess)
    return e;
  if (workspace_bytes > 0) {
    if (const cudaError_t e = cudaMalloc(&ctx->workspace, workspace_bytes); e != cudaSuccess) {
      cublasLtDestroy(ctx->handle);
      ctx->handle = nullptr;
      return e;
    }
  }
  ctx->workspace_bytes = workspace_bytes;
  ctx->plans = new LtPlanCache();
  ctx->fp8_plans = fp8_plan_cache_new();
  ctx->int8_plans = int8_plan_cache_new();
  return cudaSuccess;
}

void blas_context_destroy(BlasContext* ctx) {
  delete ctx->plans;
  fp8_plan_cache_delete(ctx->fp8_plans);
  int8_plan_cache_delete(ctx->int8_plans);
  if (ctx->workspace) cudaFree(ctx->workspace);
  if (ctx->handle) cublasLtDestroy(ctx->handle);
  *ctx = BlasContext{};
}

void blas_add_tuned_choices(BlasContext* ctx, const std::vector<TunedChoice>& choices) {
  if (ctx->plans == nullptr) return;
  for (const TunedChoice& c : choices) {
    if (c.candidate < 0 || c.candidate >= kTuneCandidates) continue;
    ctx->plans->choices[{c.m, c.n, c.k, c.dtype, c.bias}] = c.candidate;
  }
}

std::vector<TunedChoice> blas_tuned_choices(const BlasContext& ctx) {
  std::vector<TunedChoice> out;
  if (ctx.plans == nullptr) return out;
  for (const auto& [key, candidate] : ctx.plans->choices) {
    const auto& [m, n, k, dtype, bias] = key;
    out.push_back({m, n, k, dtype, bias, candidate});
  }
  return out;
}

int blas_timed_shapes(const BlasContext& ctx) {
  return ctx.plans == nullptr ? 0 : ctx.plans->timed_shapes;
}

namespace {

/// cuBLASLt's y = x w^T (+ bias) with x and w in `in`, y in `out` (fp32 accumulation), through
/// the context's plan cache. The cache key's dtype is `in` when the types are equal (the key the
/// tuning cache has always used) and in | out << 8 otherwise.
cudaError_t cublaslt_matmul(const BlasContext& ctx, const void* x, int64_t m, int64_t k,
                            const void* w, int64_t n, const void* bias, void* y, DType in,
                            DType out, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  if (m < 0 || n < 0 || k <= 0 || ctx.handle == nullptr) return cudaErrorInvalidValue;
  if (in != DType::kBF16 && in != DType::kF16) return cudaErrorInvalidValue;
  if (out != in && (out != DType::kF32 || bias != nullptr)) return cudaErrorNotSupported;
  const cudaDataType_t dt = in == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const cudaDataType_t dt_out = out == DType::kF32 ? CUDA_R_32F : dt;
  const int key_dtype =
      out == in ? static_cast<int>(in) : static_cast<int>(in) | static_cast<int>(out) << 8;
  const LtPlanCache::Key key{m, n, k, key_dtype, bias != nullptr};
  LtPlan* plan = nullptr;
  std::unique_ptr<LtPlan> uncached;
  if (ctx.plans != nullptr) {
    auto it = ctx.plans->plans.find(key);
    if (it == ctx.plans->plans.end()) {
      auto made = std::make_unique<LtPlan>();
      if (const cudaError_t e =
              make_plan(ctx, m, k, n, bias, dt, dt_out, x, w, y, stream, key, made.get());
          e != cudaSuccess)
        return e;
      it = ctx.plans->plans.emplace(key, std::move(made)).first;
    }
    plan = it->second.get();
  } else {
    uncached = std::make_unique<LtPlan>();
    if (const cudaError_t e =
            make_plan(ctx, m, k, n, bias, dt, dt_out, x, w, y, stream, key, uncached.get());
        e != cudaSuccess)
      return e;
    plan = uncached.get();
  }
  LtDescs& s = plan->descs;
  if (bias != nullptr) {
    PAGODA_LT(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                             sizeof(bias)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  PAGODA_LT(cublasLtMatmul(ctx.handle, s.op, &alpha, w, s.a, x, s.b, &beta, y, s.d, y, s.d,
                           &plan->algo, ctx.workspace, ctx.workspace_bytes, stream));
  return cudaGetLastError();
}

}  // namespace

cudaError_t linear_cublaslt(const BlasContext& ctx, const void* x, int64_t m, int64_t k,
                            const void* w, int64_t n, const void* bias, void* y, DType dtype,
                            cudaStream_t stream) {
  return cublaslt_matmul(ctx, x, m, k, w, n, bias, y, dtype, dtype, stream);
}

cudaError_t linear(const BlasContext& ctx, const void* x, int64_t m, int64_t k, const void* w,
                   int64_t n, const void* bias, void* y, DType dtype, cudaStream_t stream) {
  if (m >= 1 && m <= kGemvMaxM && k > 0 && k % 8 == 0 && aligned16(x) && aligned16(w))
    return linear_gemv(x, m, k, w, n, bias, y, dtype, stream);
  if (m > kGemvMaxM && m <= std::min(ctx.gemv_mma_max_m, kGemvLimitM) && k % 8 == 0 &&
      aligned16(x) && aligned16(w))
    return linear_gemv_mma(x, m, k, w, n, bias, y, dtype, stream, ctx.gemv_mma_tuning);
  // cuBLASLt takes odd k and n (kernel tests: k = 172, 333; n = 37); where its heuristics find no
  // algorithm for a shape, the any-shape kernel computes the same function.
  const cudaError_t e = linear_cublaslt(ctx, x, m, k, w, n, bias, y, dtype, stream);
  if (e == cudaErrorNotSupported) return linear_fallback(x, m, k, w, n, bias, y, dtype, stream);
  return e;
}

cudaError_t linear(const BlasContext& ctx, const void* x, int64_t m, int64_t k, const void* w,
                   int64_t n, const void* bias, void* y, const LinearTypes& types,
                   cudaStream_t stream) {
  if (types.x == types.w && types.w == types.y)
    return linear(ctx, x, m, k, w, n, bias, y, types.x, stream);
  if (types.x != types.w) return cudaErrorNotSupported;
  return cublaslt_matmul(ctx, x, m, k, w, n, bias, y, types.x, types.y, stream);
}

}  // namespace pagoda::cuda
