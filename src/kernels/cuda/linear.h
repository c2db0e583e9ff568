#pragma once
// Dense projections on the GPU: y = x w^T (+ bias) in bf16/f16 with fp32 accumulation.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/kv_cache.h"

namespace pagoda::cuda {

/// linear_gemv_mma's work split (gemv_mma.cu) of a plain product: 16-row groups per block and k
/// steps of 64 per round of loads of a warp. Supported: (1, 4), (2, 1), (2, 2), (4, 1); fused
/// products always run (2, 2), the fastest on every Llama-8B shape at m = 2-8.
struct GemvMmaTuning {
  int row_groups = 2;
  int steps_in_flight = 2;
};

// Measured on the H200 (docs/benchmarks.md): at m = 2-8 the tensor-core GEMV reads a decoder
// layer's weights at 85-87% of HBM (cuBLASLt 83-86%), and with the fused layers it allows the
// decode step is 2-7% faster; at m = 16 cuBLASLt wins on every shape but o.
inline constexpr int64_t kGemvMmaMaxM = 8;

/// What cuBLASLt needs across calls: a handle and a device workspace. Owned by the caller (one per
/// device/stream); create with blas_context_create, free with blas_context_destroy.
struct LtPlanCache;
struct Fp8PlanCache;   // linear_fp8.cu
struct Int8PlanCache;  // linear_int8.cu
struct BlasContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // device memory, workspace_bytes long
  size_t workspace_bytes = 0;
  // Descriptors and heuristic choice per (m, n, k, dtype, bias): the heuristic query costs tens of
  // microseconds of host time, paid once per shape instead of on each of a step's 129 GEMMs.
  // Used by one thread at a time, as the stream is.
  LtPlanCache* plans = nullptr;
  Fp8PlanCache* fp8_plans = nullptr;    // the same for linear_fp8_cublaslt (linear_fp8.h)
  Int8PlanCache* int8_plans = nullptr;  // and for int8_gemm_cublaslt (linear_int8.h)
  // linear() runs linear_gemv_mma for kGemvMaxM < m <= gemv_mma_max_m (0: never, cuBLASLt
  // instead); kGemvMmaMaxM unless changed (A/B of the crossover).
  int64_t gemv_mma_max_m = kGemvMmaMaxM;
  GemvMmaTuning gemv_mma_tuning;
  // While true, a shape met for the first time with m <= kTuneMaxM times cuBLASLt's first
  // kTuneCandidates heuristic algorithms on the call's own operands and stream (synchronising
  // it) and keeps the fastest, instead of taking the first. The decode-graph warm-up turns it on
  // (at start-up, not between requests); never during a stream capture.
  bool tune_new_plans = false;
};

// Measured on the H200 (docs/benchmarks.md, bench/kernels_cuda/blas_algos.cc): on the Llama-8B
// projections the heuristic's first choice is within 1% of the fastest at m <= 32 (4% on the LM
// head), and 2-16% slower than the fastest of its first 8 on some shapes at m = 64-256 (9% on the
// LM head at m = 64).
inline constexpr int64_t kTuneMaxM = 256;
inline constexpr int kTuneCandidates = 8;

/// The FP8 and INT8 plan caches' owner is the BlasContext (blas_context_create / _destroy call
/// these).
[[nodiscard]] Fp8PlanCache* fp8_plan_cache_new();
void fp8_plan_cache_delete(Fp8PlanCache* cache);
[[nodiscard]] Int8PlanCache* int8_plan_cache_new();
void int8_plan_cache_delete(Int8PlanCache* cache);

[[nodiscard]] cudaError_t blas_context_create(BlasContext* ctx, size_t workspace_bytes = 32u << 20);
void blas_context_destroy(BlasContext* ctx);

/// A shape's timed choice: the index of the fastest among the heuristic's first kTuneCandidates
/// algorithms for (m, n, k, dtype, bias). The heuristic's list depends only on the shape, the GPU
/// and the cuBLASLt version, so the index stays valid where those match: a choice saved after one
/// start-up (runtime/cuda/tuning_cache.h) spares the next one the timing.
struct TunedChoice {
  int64_t m = 0, n = 0, k = 0;
  int dtype = 0;  // static_cast<int>(DType)
  bool bias = false;
  int candidate = 0;
  bool operator==(const TunedChoice&) const = default;
};
/// Choices to use, without timing, for shapes met later (replacing earlier ones of the same key).
void blas_add_tuned_choices(BlasContext* ctx, const std::vector<TunedChoice>& choices);
/// Every choice the context knows: given, or timed so far.
[[nodiscard]] std::vector<TunedChoice> blas_tuned_choices(const BlasContext& ctx);
/// How many shapes this context has timed (tests: a warm start times none).
[[nodiscard]] int blas_timed_shapes(const BlasContext& ctx);

/// y[m, n] = sum_k x[m, k] * w[n, k] + bias[n], accumulated in fp32, rounded once to dtype.
/// x: [m, k] row-major; w: [n, k] row-major (a torch nn.Linear weight); bias: [n] or null;
/// y: [m, n] row-major, must not alias x or w. All in dtype (bf16 or f16), on the device.
/// w must not be written by the kernel just before this call in the stream: the GEMV requests its
/// first weights before waiting for that kernel (gemv.cu). Model weights are constant.
/// Small m with k % 8 == 0 and 16-byte aligned x, w streams W once: m <= kGemvMaxM runs
/// linear_gemv, m <= ctx.gemv_mma_max_m linear_gemv_mma; everything else runs cuBLASLt, and where
/// cuBLASLt finds no algorithm for the shape (odd k or n of small models, unaligned rows)
/// linear_fallback.
cudaError_t linear(const BlasContext& ctx, const void* x, int64_t m, int64_t k, const void* w,
                   int64_t n, const void* bias, void* y, DType dtype, cudaStream_t stream);

/// The element types of a product's input, weight and output.
struct LinearTypes {
  DType x = DType::kBF16;
  DType w = DType::kBF16;
  DType y = DType::kBF16;
};
/// linear() with the three types separate. Equal types run linear(); a bf16 or f16 product with an
/// fp32 output and no bias (an LM head writing fp32 logits) runs cuBLASLt with fp32 accumulation
/// and one rounding to fp32; other combinations are cudaErrorNotSupported until a weight format
/// brings its kernel (model/linear.h).
cudaError_t linear(const BlasContext& ctx, const void* x, int64_t m, int64_t k, const void* w,
                   int64_t n, const void* bias, void* y, const LinearTypes& types,
                   cudaStream_t stream);

// Measured on the H200 (docs/benchmarks.md): our CUDA-core GEMV beats cuBLASLt at m = 1 on every
// Llama-8B shape (up to 100% of HBM bandwidth) and loses from m = 2-4 on. linear() routes m <= this
// to the GEMV; linear_gemv itself still accepts m up to 16.
inline constexpr int64_t kGemvMaxM = 1;
inline constexpr int64_t kGemvLimitM = 16;

/// The small-m path alone (for tests and benchmarks): needs 1 <= m <= kGemvLimitM, k % 8 == 0 and
/// x, w 16-byte aligned; otherwise returns cudaErrorInvalidValue.
cudaError_t linear_gemv(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                        const void* bias, void* y, DType dtype, cudaStream_t stream);

/// The tensor-core small-m path alone: same requirements as linear_gemv (1 <= m <= kGemvLimitM,
/// k % 8 == 0, x and w 16-byte aligned), otherwise cudaErrorInvalidValue.
cudaError_t linear_gemv_mma(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                            const void* bias, void* y, DType dtype, cudaStream_t stream,
                            const GemvMmaTuning& tuning = {});

/// What linear_gemv_fused folds around the product (decode at batch 1 runs a decoder layer's
/// norms, residual adds and SiLU-and-mul inside its projections instead of as separate kernels).
enum class GemvEpilogue : uint8_t {
  kStore,       // y = x w^T + bias
  kAccumulate,  // y += x w^T + bias: the residual add, in place (y is read, then written)
  kGatedSilu,   // w = [gate; up] ([n, k], n even); y[m, n / 2] = silu(gate + b) * (up + b)
  kRopeCache,   // w = [q; k; v]: y = x w^T + b with q and k rotated, k and v written to the cache
};
/// kRopeCache's inputs: what rope_and_cache (rope.h) does after the qkv projection, done by the
/// projection itself. y: [m, (num_heads + 2 * num_kv_heads) * head_dim] = n; q and k are rotated
/// in the rotate-half convention at angle float(positions[r]) * inv_freq[i] (full-precision
/// sincosf), then row r's k and v go to slot slot_mapping[r] (< 0: not cached). head_dim % 4 == 0.
struct GemvRope {
  const int32_t* positions = nullptr;     // [m]
  const float* inv_freq = nullptr;        // [head_dim / 2] fp32, scaling applied
  const int64_t* slot_mapping = nullptr;  // [m]
  void* key_cache = nullptr;              // KVCacheLayout, dtype
  void* value_cache = nullptr;            // KVCacheLayout, dtype
  KVCacheLayout layout;
  int num_heads = 0;
  DType cache_dtype = DType::kBF16;  // today it must be the GEMV's dtype (else NotSupported)
};
struct GemvFusion {
  // Non-null: x is RMS-normalised first, y = (x / rms(x) * norm_weight) w^T, with
  // rms(x) = sqrt(mean(x^2) + norm_eps) over the k elements of each row; norm_weight: [k] in dtype,
  // 16-byte aligned. The normalised x is never rounded to dtype (the unfused path rounds it once).
  const void* norm_weight = nullptr;
  float norm_eps = 0.0f;
  GemvEpilogue epilogue = GemvEpilogue::kStore;
  GemvRope rope;  // kRopeCache only
};

/// linear_gemv with a GemvFusion: same requirements, plus n even for kGatedSilu and a consistent
/// GemvRope for kRopeCache. y must not alias x or w (kAccumulate reads and writes y itself).
cudaError_t linear_gemv_fused(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                              const void* bias, void* y, const GemvFusion& fusion, DType dtype,
                              cudaStream_t stream);

/// linear_gemv_mma with a GemvFusion: the requirements of linear_gemv_fused, and head_dim % 32 == 0
/// for kRopeCache. Fused products always run the (2, 2) split and ignore `tuning`. With a norm, x
/// times the norm weight is rounded once to dtype for the tensor cores (1 / rms is applied to the
/// fp32 sums).
cudaError_t linear_gemv_mma_fused(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                                  const void* bias, void* y, const GemvFusion& fusion, DType dtype,
                                  cudaStream_t stream, const GemvMmaTuning& tuning = {});

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
