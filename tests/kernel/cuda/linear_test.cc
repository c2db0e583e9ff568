// CUDA linear (GEMV for small m, cuBLASLt otherwise, the any-shape fallback) against cpu::linear.
//
// How to add a case: extend kMs or kShapes. Each case runs the dispatching linear() and, where
// legal, each path alone (linear_gemv for m <= 16 with k % 8 == 0, linear_cublaslt and
// linear_fallback always), with and without bias, in bf16 and f16.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/linear.h"

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

enum class Path { kDispatch, kGemv, kCublasLt, kFallback };

TEST(CudaLinear, MatchesCpuOverGrid) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  BlasContext ctx;
  CUDA_OK(blas_context_create(&ctx));
  uint32_t seed = 1;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const KN s : kShapes) {
      for (int64_t m : kMs) {
        const HalfData x = random_half(m * s.k, dt, seed++);
        const HalfData w = random_half(s.n * s.k, dt, seed++, -0.5f, 0.5f);
        const HalfData bias = random_half(s.n, dt, seed++);
        std::vector<uint8_t> wbytes(w.bits.size() * 2);
        std::memcpy(wbytes.data(), w.bits.data(), wbytes.size());
        DeviceBuffer dx = to_device(x.bits), dw = to_device(w.bits), db = to_device(bias.bits);
        DeviceBuffer dy(m * s.n * 2);
        for (bool with_bias : {false, true}) {
          std::vector<float> ref(m * s.n);
          cpu::linear(x.values.data(), m, s.k, wbytes.data(), dt, s.n,
                      with_bias ? bias.values.data() : nullptr, ref.data(), pool);
          for (Path path : {Path::kDispatch, Path::kGemv, Path::kCublasLt, Path::kFallback}) {
            const bool gemv_ok = m <= kGemvLimitM && s.k % 8 == 0;
            if (path == Path::kGemv && !gemv_ok) continue;
            SCOPED_TRACE(::testing::Message()
                         << dtype_label(dt) << " m=" << m << " k=" << s.k << " n=" << s.n
                         << " bias=" << with_bias << " path=" << static_cast<int>(path));
            poison(dy);
            const void* b = with_bias ? db.get() : nullptr;
            if (path == Path::kDispatch) {
              CUDA_OK(linear(ctx, dx.get(), m, s.k, dw.get(), s.n, b, dy.get(), dt, nullptr));
            } else if (path == Path::kGemv) {
              CUDA_OK(linear_gemv(dx.get(), m, s.k, dw.get(), s.n, b, dy.get(), dt, nullptr));
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

TEST(CudaLinear, GemvRejectsIllegalShapes) {
  REQUIRE_GPU();
  DeviceBuffer x(64 * 2), w(64 * 2), y(64 * 2);
  EXPECT_EQ(linear_gemv(x.get(), 17, 8, w.get(), 1, nullptr, y.get(), DType::kBF16, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(linear_gemv(x.get(), 1, 7, w.get(), 1, nullptr, y.get(), DType::kBF16, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(linear_gemv(x.get(), 1, 8, w.get(), 1, nullptr, y.get(), DType::kF32, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pagoda::cuda
