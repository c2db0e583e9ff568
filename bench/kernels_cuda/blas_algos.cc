// blas_algos: how far cuBLASLt's first heuristic choice is from the fastest of its candidates on
// the Llama-3.1-8B projections at the decode and prefill-chunk sizes m = 8 ... 512 (bf16,
// y[m, n] = x[m, k] w[n, k]^T, the layout linear.cu uses).
//
// For each shape and m it asks the heuristic for up to 16 algorithms, times each with the
// protocol of bench_kernels_cuda.cc (W rotated over copies totalling 512 MB, back-to-back calls
// between two events, median of 15 batches) and prints the first choice, the fastest and their
// percent of HBM (weight + x + y bytes) and of the bf16 matrix peak. Run: bench/device/run.sh
// --blas-algos, or the binary alone.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include "bench_cuda.h"

namespace {

constexpr double kHbmTBs = 4.19;
constexpr double kBf16Tflops = 786.0;
constexpr size_t kRotateBytes = size_t{512} << 20;
constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what blas_context_create gives the engine

#define CHECK_LT(expr)                                                                   \
  do {                                                                                   \
    const cublasStatus_t s_ = (expr);                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                   \
      std::fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #expr, (int)s_); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

using pagoda::cuda::bench::time_ms;

// Bytes of memory are enough: the values do not change the time of a bf16 GEMM.
void* alloc_filled(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes));
  CHECK_CUDA(cudaMemset(p, 0x3c, bytes));  // 0x3c3c as bf16: 0.0115
  return p;
}

template <typename T>
T algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written);
  return v;
}

}  // namespace

int main() {
  cublasLtHandle_t handle;
  CHECK_LT(cublasLtCreate(&handle));
  void* workspace = alloc_filled(kWorkspaceBytes);
  std::printf("# cuBLASLt: the heuristic's first choice against the fastest of its candidates\n");
  std::printf("%-8s %4s %5s | %9s %6s %6s %7s | %9s %6s %6s %7s %4s | %6s\n", "shape", "m", "cands",
              "first us", "%HBM", "%peak", "tile/sk", "best us", "%HBM", "%peak", "tile/sk", "idx",
              "gain");
  double total_first = 0, total_best = 0;
  for (const pagoda::cuda::bench::ProjectionShape& s : pagoda::cuda::bench::kLlama8bProjections) {
    const size_t w_bytes = static_cast<size_t>(s.n) * s.k * 2;
    const int copies = static_cast<int>(std::max<size_t>(1, kRotateBytes / w_bytes));
    std::vector<void*> w(copies);
    for (int i = 0; i < copies; ++i) w[i] = alloc_filled(w_bytes);
    void* x = alloc_filled(512 * s.k * 2);
    void* y = alloc_filled(512 * s.n * 2);
    for (int64_t m : {8, 16, 32, 64, 128, 256, 512}) {
      cublasLtMatmulDesc_t op;
      CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
      CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
      cublasLtMatrixLayout_t la, lb, ld;
      CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.k, s.n, s.k));
      CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.k, m, s.k));
      CHECK_LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, s.n, m, s.n));
      cublasLtMatmulPreference_t pref;
      CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
      const uint64_t ws = kWorkspaceBytes;
      CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof(ws)));
      cublasLtMatmulHeuristicResult_t results[16];
      int found = 0;
      CHECK_LT(
          cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, ld, ld, pref, 16, results, &found));
      const float alpha = 1.0f, beta = 0.0f;
      const int per_batch = std::max(copies, 20);
      double first = 0, best = 1e30;
      int best_i = 0;
      for (int i = 0; i < found; ++i) {
        if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
        const double ms = time_ms(
            [&](int c) {
              CHECK_LT(cublasLtMatmul(handle, op, &alpha, w[c % copies], la, x, lb, &beta, y, ld, y,
                                      ld, &results[i].algo, workspace, kWorkspaceBytes, nullptr));
            },
            per_batch);
        if (i == 0) first = ms;
        if (ms < best) {
          best = ms;
          best_i = i;
        }
      }
      const double bytes = static_cast<double>(w_bytes) + 2.0 * m * (s.k + s.n);
      const double flops = 2.0 * m * s.n * s.k;
      auto hbm = [&](double ms) { return 100 * bytes / (ms * 1e-3) / 1e12 / kHbmTBs; };
      auto peak = [&](double ms) { return 100 * flops / (ms * 1e-3) / 1e12 / kBf16Tflops; };
      auto cfg = [&](int i) {
        return algo_config<int>(results[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID) * 100 +
               algo_config<int>(results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
      };
      std::printf(
          "%-8s %4lld %5d | %9.1f %5.0f%% %5.0f%% %7d | %9.1f %5.0f%% %5.0f%% %7d %4d | %5.1f%%\n",
          s.name, static_cast<long long>(m), found, first * 1e3, hbm(first), peak(first), cfg(0),
          best * 1e3, hbm(best), peak(best), cfg(best_i), best_i, 100 * (first / best - 1));
      if (m == 64) {
        total_first += first;
        total_best += best;
      }
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(ld);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatmulDescDestroy(op);
    }
    for (void* p : w) cudaFree(p);
    cudaFree(x);
    cudaFree(y);
  }
  std::printf("m = 64, the five shapes once each: first choice %.1f us, fastest %.1f us\n",
              total_first * 1e3, total_best * 1e3);
  cudaFree(workspace);
  cublasLtDestroy(handle);
  return 0;
}
