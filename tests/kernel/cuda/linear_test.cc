// CUDA linear (GEMV for small m, cuBLASLt otherwise, the any-shape fallback) against cpu::linear.
//
// How to add a case: extend kMs or kShapes. Each case runs the dispatching linear() and, where
// legal, each path alone (linear_gemv for m <= 16 with k % 8 == 0, linear_cublaslt and
// linear_fallback always), with and without bias, in bf16 and f16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>

#include "cuda_test_util.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/rope.h"

namespace pagoda::cuda {
namespace {

using namespace testing;  // NOLINT

const int64_t kMs[] = {1, 2, 3, 7, 16, 33, 128, 300};
struct KN {
  int64_t k, n;
};
// Odd n, odd k (GEMV not legal: cuBLASLt), a k that is a multiple of 8 but not of 256x8, a
// Llama-sized row, and stories260K's projections (qkv 64 -> 128, gate_up 64 -> 344, down 172 ->
// 64, tied LM head 64 -> 512) and a q/k-norm fixture's o_proj (96 -> 64).
const KN kShapes[] = {{64, 48},  {520, 37}, {333, 129}, {1000, 257}, {4096, 512}, {64, 128},
                      {64, 344}, {172, 64}, {64, 512},  {96, 64},    {8, 24}};

// Random x [m, k], w [n, k] (in [-0.5, 0.5]) and bias [n], on the host and on the device.
struct LinearInputs {
  HalfData x, w, bias;
  std::vector<uint8_t> wbytes;  // w's bits, as cpu::linear reads a weight
  DeviceBuffer dx, dw, db;
};
LinearInputs random_linear_inputs(int64_t m, int64_t k, int64_t n, DType dt, uint32_t& seed) {
  LinearInputs in;
  in.x = random_half(m * k, dt, seed++);
  in.w = random_half(n * k, dt, seed++, -0.5f, 0.5f);
  in.bias = random_half(n, dt, seed++);
  in.wbytes.resize(in.w.bits.size() * 2);
  std::memcpy(in.wbytes.data(), in.w.bits.data(), in.wbytes.size());
  in.dx = to_device(in.x.bits);
  in.dw = to_device(in.w.bits);
  in.db = to_device(in.bias.bits);
  return in;
}

enum class Path { kDispatch, kGemv, kGemvMma, kCublasLt, kFallback };

TEST(CudaLinear, MatchesCpuOverGrid) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  BlasContext ctx;
  CUDA_OK(blas_context_create(&ctx));
  uint32_t seed = 1;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const KN s : kShapes) {
      for (int64_t m : kMs) {
        const LinearInputs in = random_linear_inputs(m, s.k, s.n, dt, seed);
        const HalfData &x = in.x, &bias = in.bias;
        const std::vector<uint8_t>& wbytes = in.wbytes;
        const DeviceBuffer &dx = in.dx, &dw = in.dw, &db = in.db;
        DeviceBuffer dy(m * s.n * 2);
        for (bool with_bias : {false, true}) {
          std::vector<float> ref(m * s.n);
          cpu::linear(x.values.data(), m, s.k, wbytes.data(), dt, s.n,
                      with_bias ? bias.values.data() : nullptr, ref.data(), pool);
          for (Path path :
               {Path::kDispatch, Path::kGemv, Path::kGemvMma, Path::kCublasLt, Path::kFallback}) {
            const bool gemv_ok = m <= kGemvLimitM && s.k % 8 == 0;
            if ((path == Path::kGemv || path == Path::kGemvMma) && !gemv_ok) continue;
            SCOPED_TRACE(::testing::Message()
                         << dtype_label(dt) << " m=" << m << " k=" << s.k << " n=" << s.n
                         << " bias=" << with_bias << " path=" << static_cast<int>(path));
            poison(dy);
            const void* b = with_bias ? db.get() : nullptr;
            if (path == Path::kDispatch) {
              CUDA_OK(linear(ctx, dx.get(), m, s.k, dw.get(), s.n, b, dy.get(), dt, nullptr));
            } else if (path == Path::kGemv) {
              CUDA_OK(linear_gemv(dx.get(), m, s.k, dw.get(), s.n, b, dy.get(), dt, nullptr));
            } else if (path == Path::kGemvMma) {
              CUDA_OK(linear_gemv_mma(dx.get(), m, s.k, dw.get(), s.n, b, dy.get(), dt, nullptr));
            } else if (path == Path::kCublasLt) {
              CUDA_OK(
                  linear_cublaslt(ctx, dx.get(), m, s.k, dw.get(), s.n, b, dy.get(), dt, nullptr));
            } else {
              CUDA_OK(linear_fallback(dx.get(), m, s.k, dw.get(), s.n, b, dy.get(), dt, nullptr));
            }
            CUDA_OK(cudaDeviceSynchronize());
            EXPECT_LE(normalised_error(halves_to_floats(to_host<uint16_t>(dy, m * s.n), dt), ref),
                      tolerance(dt));
          }
        }
      }
    }
  }
  blas_context_destroy(&ctx);
}

// With tune_new_plans, a new shape times cuBLASLt's candidates on its own operands and keeps the
// fastest: the result must still be the product (with and without bias), and a shape first met
// inside a stream capture must not be timed there (the capture would fail), yet run correctly.
// Separate types: bf16/f16 products written as fp32 (cuBLASLt, one rounding to fp32: closer to the
// fp32 reference than a 16-bit output), and the combinations without a kernel refused by name.
TEST(CudaLinear, SeparateTypesWriteFp32OutputsOrRefuse) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  BlasContext ctx;
  CUDA_OK(blas_context_create(&ctx));
  uint32_t seed = 7;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const KN s : {KN{64, 512}, KN{4096, 512}, KN{333, 129}}) {
      for (int64_t m : {1, 8, 300}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_label(dt) << " m=" << m << " k=" << s.k << " n=" << s.n);
        const LinearInputs in = random_linear_inputs(m, s.k, s.n, dt, seed);
        std::vector<float> ref(static_cast<size_t>(m * s.n));
        cpu::linear(in.x.values.data(), m, s.k, in.wbytes.data(), dt, s.n, nullptr, ref.data(),
                    pool);
        DeviceBuffer dy(static_cast<size_t>(m * s.n) * sizeof(float));
        poison(dy);
        CUDA_OK(linear(ctx, in.dx.get(), m, s.k, in.dw.get(), s.n, nullptr, dy.get(),
                       LinearTypes{dt, dt, DType::kF32}, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_LE(normalised_error(to_host<float>(dy, m * s.n), ref), 1e-4);
        // A bias with an fp32 output, and mixed input and weight types, have no kernel yet.
        EXPECT_EQ(linear(ctx, in.dx.get(), m, s.k, in.dw.get(), s.n, in.db.get(), dy.get(),
                         LinearTypes{dt, dt, DType::kF32}, nullptr),
                  cudaErrorNotSupported);
        EXPECT_EQ(linear(ctx, in.dx.get(), m, s.k, in.dw.get(), s.n, nullptr, dy.get(),
                         LinearTypes{DType::kF32, dt, dt}, nullptr),
                  cudaErrorNotSupported);
      }
    }
  }
  blas_context_destroy(&ctx);
}

TEST(CudaLinear, TunedPlansMatchCpuAndSkipCaptures) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  BlasContext ctx;
  CUDA_OK(blas_context_create(&ctx));
  ctx.tune_new_plans = true;
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint32_t seed = 900;
  const DType dt = DType::kBF16;
  for (const KN s : {KN{4096, 512}, KN{1000, 257}, KN{64, 344}}) {
    for (int64_t m : {16, 64, 200, 256}) {
      for (bool with_bias : {false, true}) {
        for (bool captured : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "m=" << m << " k=" << s.k << " n=" << s.n
                                            << " bias=" << with_bias << " captured=" << captured);
          // A fresh shape each time: m + captured keeps the plan cache from serving it.
          const int64_t rows = m + (captured ? 1 : 0);
          const LinearInputs in = random_linear_inputs(rows, s.k, s.n, dt, seed);
          DeviceBuffer dy(rows * s.n * 2);
          poison(dy);
          std::vector<float> ref(rows * s.n);
          cpu::linear(in.x.values.data(), rows, s.k, in.wbytes.data(), dt, s.n,
                      with_bias ? in.bias.values.data() : nullptr, ref.data(), pool);
          const void* b = with_bias ? in.db.get() : nullptr;
          if (!captured) {
            CUDA_OK(linear_cublaslt(ctx, in.dx.get(), rows, s.k, in.dw.get(), s.n, b, dy.get(), dt,
                                    stream));
          } else {
            cudaGraph_t graph = nullptr;
            cudaGraphExec_t exec = nullptr;
            CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            const cudaError_t call = linear_cublaslt(ctx, in.dx.get(), rows, s.k, in.dw.get(), s.n,
                                                     b, dy.get(), dt, stream);
            CUDA_OK(cudaStreamEndCapture(stream, &graph));
            CUDA_OK(call);
            CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
            CUDA_OK(cudaGraphLaunch(exec, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(graph);
          }
          CUDA_OK(cudaStreamSynchronize(stream));
          EXPECT_LE(normalised_error(halves_to_floats(to_host<uint16_t>(dy, rows * s.n), dt), ref),
                    tolerance(dt));
        }
      }
    }
  }
  cudaStreamDestroy(stream);
  blas_context_destroy(&ctx);
}

// linear_gemv_fused and linear_gemv_mma_fused against the unfused CPU composition: rms_norm then
// linear (the normalised x kept in fp32), then the epilogue (residual add, or silu(gate) * up over
// W = [gate; up]).
TEST(CudaLinear, GemvFusionsMatchTheUnfusedCpuComposition) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  const KN shapes[] = {{64, 48}, {1000, 258}, {4096, 512}, {64, 344}, {8, 24}, {128, 8}};
  const float eps = 1e-5f;
  uint32_t seed = 500;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const KN s : shapes) {
      for (int64_t m : {1, 2, 3, 8, 9, 16}) {
        const HalfData x = random_half(m * s.k, dt, seed++, -2.0f, 2.0f);
        const HalfData w = random_half(s.n * s.k, dt, seed++, -0.5f, 0.5f);
        const HalfData bias = random_half(s.n, dt, seed++);
        const HalfData gamma = random_half(s.k, dt, seed++, 0.5f, 1.5f);
        const HalfData residual = random_half(m * s.n, dt, seed++, -4.0f, 4.0f);
        std::vector<uint8_t> wbytes(w.bits.size() * 2);
        std::memcpy(wbytes.data(), w.bits.data(), wbytes.size());
        DeviceBuffer dx = to_device(x.bits), dw = to_device(w.bits), db = to_device(bias.bits);
        DeviceBuffer dg = to_device(gamma.bits), dy(m * s.n * 2);
        std::vector<float> normed(m * s.k);
        cpu::rms_norm(x.values.data(), gamma.values.data(), m, s.k, eps, normed.data(), pool);
        for (bool norm : {false, true}) {
          for (GemvEpilogue epi :
               {GemvEpilogue::kStore, GemvEpilogue::kAccumulate, GemvEpilogue::kGatedSilu}) {
            for (int variant = 0; variant < 4; ++variant) {
              const bool with_bias = variant & 1, mma = variant & 2;
              SCOPED_TRACE(::testing::Message()
                           << dtype_label(dt) << " m=" << m << " k=" << s.k << " n=" << s.n
                           << " norm=" << norm << " epilogue=" << static_cast<int>(epi)
                           << " bias=" << with_bias << " mma=" << mma);
              std::vector<float> full(m * s.n);
              cpu::linear(norm ? normed.data() : x.values.data(), m, s.k, wbytes.data(), dt, s.n,
                          with_bias ? bias.values.data() : nullptr, full.data(), pool);
              const int64_t out_cols = epi == GemvEpilogue::kGatedSilu ? s.n / 2 : s.n;
              std::vector<float> ref(m * out_cols);
              for (int64_t i = 0; i < m; ++i) {
                for (int64_t c = 0; c < out_cols; ++c) {
                  const float v = full[i * s.n + c];
                  if (epi == GemvEpilogue::kStore) ref[i * out_cols + c] = v;
                  if (epi == GemvEpilogue::kAccumulate)
                    ref[i * out_cols + c] = residual.values[i * s.n + c] + v;
                  if (epi == GemvEpilogue::kGatedSilu)
                    ref[i * out_cols + c] =
                        v / (1.0f + std::exp(-v)) * full[i * s.n + out_cols + c];
                }
              }
              if (epi == GemvEpilogue::kAccumulate) {
                CUDA_OK(cudaMemcpy(dy.get(), residual.bits.data(), residual.bits.size() * 2,
                                   cudaMemcpyHostToDevice));
              } else {
                poison(dy);
              }
              GemvFusion f;
              f.norm_weight = norm ? dg.get() : nullptr;
              f.norm_eps = eps;
              f.epilogue = epi;
              const void* b = with_bias ? db.get() : nullptr;
              if (mma) {
                CUDA_OK(linear_gemv_mma_fused(dx.get(), m, s.k, dw.get(), s.n, b, dy.get(), f, dt,
                                              nullptr));
              } else {
                CUDA_OK(linear_gemv_fused(dx.get(), m, s.k, dw.get(), s.n, b, dy.get(), f, dt,
                                          nullptr));
              }
              CUDA_OK(cudaDeviceSynchronize());
              EXPECT_LE(
                  normalised_error(halves_to_floats(to_host<uint16_t>(dy, m * out_cols), dt), ref),
                  tolerance(dt));
              if (epi == GemvEpilogue::kGatedSilu) {
                // Nothing is written past the m x n / 2 output (poison() fills 0xff bytes).
                const std::vector<uint16_t> all = to_host<uint16_t>(dy, m * s.n);
                EXPECT_TRUE(std::all_of(all.begin() + m * out_cols, all.end(),
                                        [](uint16_t v) { return v == 0xffff; }));
              }
            }
          }
        }
      }
    }
  }
}

// kRopeCache of both kernels against the unfused GPU path (the GEMV, then rope_and_cache, each
// tested against the CPU above and in elementwise_test): the rotated q and k, the unchanged v, and
// both caches. The tensor-core kernel needs head_dim % 32 == 0 and refuses the others.
TEST(CudaLinear, GemvRopeEpilogueMatchesRopeAndCache) {
  REQUIRE_GPU();
  struct Shape {
    int heads, kv_heads, head_dim, block_size;
    int64_t k;
  };
  uint32_t seed = 900;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const Shape s : {Shape{32, 8, 128, 16, 512}, Shape{4, 2, 16, 16, 64},
                          Shape{8, 8, 64, 5, 128}, Shape{4, 1, 24, 3, 64}}) {
      for (int64_t m : {1, 3, 9}) {
        for (bool norm : {false, true}) {
          for (int variant = 0; variant < 4; ++variant) {
            const bool with_bias = variant & 1, mma = variant & 2;
            SCOPED_TRACE(::testing::Message()
                         << dtype_label(dt) << " heads=" << s.heads << "/" << s.kv_heads
                         << " d=" << s.head_dim << " m=" << m << " norm=" << norm
                         << " bias=" << with_bias << " mma=" << mma);
            const int d = s.head_dim;
            const int64_t n = static_cast<int64_t>(s.heads + 2 * s.kv_heads) * d;
            const HalfData x = random_half(m * s.k, dt, seed++, -2.0f, 2.0f);
            const HalfData w = random_half(n * s.k, dt, seed++, -0.5f, 0.5f);
            const HalfData bias = random_half(n, dt, seed++);
            const HalfData gamma = random_half(s.k, dt, seed++, 0.5f, 1.5f);
            std::vector<float> inv_freq(d / 2);
            for (int i = 0; i < d / 2; ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / d);
            std::mt19937 gen(seed++);
            std::vector<int32_t> positions(m);
            for (auto& p : positions) p = static_cast<int32_t>(gen() % 100000);
            const int64_t num_blocks = (m + s.block_size - 1) / s.block_size + 2;
            std::vector<int64_t> perm(num_blocks * s.block_size), slots(m);
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), gen);
            for (int64_t t = 0; t < m; ++t) slots[t] = t == 1 ? -1 : perm[t];
            const size_t cache_bytes = num_blocks * s.block_size * s.kv_heads * d * 2;
            DeviceBuffer dx = to_device(x.bits), dw = to_device(w.bits), db = to_device(bias.bits);
            DeviceBuffer dg = to_device(gamma.bits), dfreq = to_device(inv_freq);
            DeviceBuffer dpos = to_device(positions), dslots = to_device(slots);
            DeviceBuffer ref_y(m * n * 2), ref_k(cache_bytes), ref_v(cache_bytes);
            DeviceBuffer got_y(m * n * 2), got_k(cache_bytes), got_v(cache_bytes);
            for (const DeviceBuffer* b : {&ref_k, &ref_v, &got_k, &got_v})
              CUDA_OK(cudaMemset(b->get(), 0, cache_bytes));
            poison(got_y);
            GemvFusion f;
            f.norm_weight = norm ? dg.get() : nullptr;
            f.norm_eps = 1e-6f;
            const void* b = with_bias ? db.get() : nullptr;
            CUDA_OK(
                linear_gemv_fused(dx.get(), m, s.k, dw.get(), n, b, ref_y.get(), f, dt, nullptr));
            RopeCacheParams rp;
            auto* base = ref_y.as<uint16_t>();
            rp.q = base;
            rp.k = base + s.heads * d;
            rp.v = base + (s.heads + s.kv_heads) * d;
            rp.q_stride = rp.k_stride = rp.v_stride = n;
            rp.positions = dpos.as<int32_t>();
            rp.inv_freq = dfreq.as<float>();
            rp.slot_mapping = dslots.as<int64_t>();
            rp.key_cache = ref_k.get();
            rp.value_cache = ref_v.get();
            rp.num_tokens = m;
            rp.num_heads = s.heads;
            rp.layout = {num_blocks, s.block_size, s.kv_heads, d};
            rp.dtype = dt;
            rp.cache_dtype = dt;
            CUDA_OK(rope_and_cache(rp, nullptr));

            f.epilogue = GemvEpilogue::kRopeCache;
            f.rope.positions = rp.positions;
            f.rope.inv_freq = rp.inv_freq;
            f.rope.slot_mapping = rp.slot_mapping;
            f.rope.key_cache = got_k.get();
            f.rope.value_cache = got_v.get();
            f.rope.layout = rp.layout;
            f.rope.num_heads = s.heads;
            f.rope.cache_dtype = dt;
            if (mma && d % 32 != 0) {
              EXPECT_EQ(linear_gemv_mma_fused(dx.get(), m, s.k, dw.get(), n, b, got_y.get(), f, dt,
                                              nullptr),
                        cudaErrorInvalidValue);
              continue;
            }
            if (mma) {
              CUDA_OK(linear_gemv_mma_fused(dx.get(), m, s.k, dw.get(), n, b, got_y.get(), f, dt,
                                            nullptr));
            } else {
              CUDA_OK(
                  linear_gemv_fused(dx.get(), m, s.k, dw.get(), n, b, got_y.get(), f, dt, nullptr));
            }
            CUDA_OK(cudaDeviceSynchronize());
            auto floats = [&](const DeviceBuffer& buf, size_t count) {
              return halves_to_floats(to_host<uint16_t>(buf, count), dt);
            };
            EXPECT_LE(normalised_error(floats(got_y, m * n), floats(ref_y, m * n)), tolerance(dt));
            EXPECT_LE(
                normalised_error(floats(got_k, cache_bytes / 2), floats(ref_k, cache_bytes / 2)),
                tolerance(dt));
            EXPECT_LE(
                normalised_error(floats(got_v, cache_bytes / 2), floats(ref_v, cache_bytes / 2)),
                tolerance(dt));
          }
        }
      }
    }
  }
}

// Every work split of the tensor-core GEMV, and linear() routing to it, against the CPU: n not a
// multiple of the block's rows, k not a multiple of the 64-wide k step, both n-tile counts.
TEST(CudaLinear, GemvMmaSplitsMatchCpu) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  BlasContext ctx;
  CUDA_OK(blas_context_create(&ctx));
  ctx.gemv_mma_max_m = kGemvLimitM;
  const GemvMmaTuning tunings[] = {{1, 4}, {2, 1}, {2, 2}, {4, 1}};
  const KN shapes[] = {{1000, 257}, {4104, 72}, {520, 37}, {8, 24}, {2048, 200}};
  uint32_t seed = 100;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const KN s : shapes) {
      for (int64_t m : {2, 5, 8, 9, 16}) {
        const LinearInputs in = random_linear_inputs(m, s.k, s.n, dt, seed);
        const HalfData &x = in.x, &bias = in.bias;
        const std::vector<uint8_t>& wbytes = in.wbytes;
        const DeviceBuffer &dx = in.dx, &dw = in.dw, &db = in.db;
        DeviceBuffer dy(m * s.n * 2);
        std::vector<float> ref(m * s.n);
        cpu::linear(x.values.data(), m, s.k, wbytes.data(), dt, s.n, bias.values.data(), ref.data(),
                    pool);
        for (int i = -1; i < static_cast<int>(std::size(tunings)); ++i) {
          SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " m=" << m << " k=" << s.k
                                            << " n=" << s.n << " tuning=" << i);
          poison(dy);
          if (i < 0) {  // the dispatch
            CUDA_OK(linear(ctx, dx.get(), m, s.k, dw.get(), s.n, db.get(), dy.get(), dt, nullptr));
          } else {
            CUDA_OK(linear_gemv_mma(dx.get(), m, s.k, dw.get(), s.n, db.get(), dy.get(), dt,
                                    nullptr, tunings[i]));
          }
          CUDA_OK(cudaDeviceSynchronize());
          EXPECT_LE(normalised_error(halves_to_floats(to_host<uint16_t>(dy, m * s.n), dt), ref),
                    tolerance(dt));
        }
      }
    }
  }
  blas_context_destroy(&ctx);
}

TEST(CudaLinear, GemvRejectsIllegalShapes) {
  REQUIRE_GPU();
  DeviceBuffer x(64 * 2), w(64 * 2), y(64 * 2);
  EXPECT_EQ(linear_gemv(x.get(), 17, 8, w.get(), 1, nullptr, y.get(), DType::kBF16, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(linear_gemv(x.get(), 1, 7, w.get(), 1, nullptr, y.get(), DType::kBF16, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(linear_gemv(x.get(), 1, 8, w.get(), 1, nullptr, y.get(), DType::kF32, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(linear_gemv_mma(x.get(), 17, 8, w.get(), 1, nullptr, y.get(), DType::kBF16, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(linear_gemv_mma(x.get(), 2, 12, w.get(), 1, nullptr, y.get(), DType::kBF16, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(
      linear_gemv_mma(x.get(), 2, 8, w.get(), 1, nullptr, y.get(), DType::kBF16, nullptr, {3, 1}),
      cudaErrorInvalidValue);
  GemvFusion gated;
  gated.epilogue = GemvEpilogue::kGatedSilu;  // n must be even: gate and up halves
  EXPECT_EQ(
      linear_gemv_fused(x.get(), 1, 8, w.get(), 3, nullptr, y.get(), gated, DType::kBF16, nullptr),
      cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pagoda::cuda
