// The FP8 kernels (kernels/cuda/linear_fp8.h) against the CPU references of kernels/cpu/quant_*:
//  - quantize_fp8_rows: the same e4m3 codes and scales as cpu::fake_quantize_fp8_rows (per token,
//    static) and as --quantization fp8's weight rule, bit for bit;
//  - linear_fp8_gemv (weight-only, plain and fused): cpu::dequant_matmul over the dequantized
//    weight, with the norm, residual and SiLU-and-mul done on the host;
//  - the W8A8 GEMM (cuBLASLt, the fallback, and linear_fp8's dispatch): the CPU product of the
//    fake-quantized input, in bf16 and f16, with and without bias.
// Shapes: m in {1, 3, 8, 64, 300}; k and n multiples of 16 and not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/fp8.h"
#include "core/thread_pool.h"
#include "cuda_test_util.h"
#include "kernels/cpu/quant_dequant.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cuda/linear_fp8.h"

namespace pagoda::cuda {
namespace {

using namespace testing;  // NOLINT

const int64_t kMs[] = {1, 3, 8, 64, 300};
struct KN {
  int64_t k, n;
};
// cuBLASLt-legal (k % 16 == 0, n % 8 == 0) and not: odd n, k % 16 == 8, odd k (fallback only).
const KN kShapes[] = {{64, 48}, {4096, 512}, {1024, 1000}, {520, 37}, {136, 40}, {333, 129}};

/// A random FP8 weight [n, k]: codes of uniform values in [-0.5, 0.5] quantized per row, scales
/// per row, and a bias; on the host and the device.
struct Fp8Inputs {
  std::vector<uint8_t> codes;  // [n, k]
  std::vector<float> scales;   // [n]
  HalfData bias;               // [n]
  DeviceBuffer dw, ds, db;
};
Fp8Inputs random_fp8_weight(int64_t n, int64_t k, DType dt, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  Fp8Inputs in;
  in.codes.resize(static_cast<size_t>(n * k));
  in.scales.resize(static_cast<size_t>(n));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0;
    for (float& v : row) {
      v = dist(gen);
      amax = std::max(amax, std::fabs(v));
    }
    const float s = amax / kE4M3Max;
    in.scales[static_cast<size_t>(j)] = s;
    for (int64_t l = 0; l < k; ++l)
      in.codes[static_cast<size_t>(j * k + l)] = float_to_e4m3(row[static_cast<size_t>(l)] / s);
  }
  in.bias = random_half(static_cast<size_t>(n), dt, seed + 1);
  in.dw = to_device(in.codes);
  in.ds = to_device(in.scales);
  in.db = to_device(in.bias.bits);
  return in;
}

Fp8WeightView view(const Fp8Inputs& in, int64_t n, int64_t k, bool with_bias) {
  Fp8WeightView v;
  v.w = in.dw.as<uint8_t>();
  v.scale = in.ds.as<float>();
  v.bias = with_bias ? in.db.get() : nullptr;
  v.n = n;
  v.k = k;
  return v;
}

/// y = x W^T (+ bias) on the CPU, W dequantized exactly (cpu::dequantize_rows).
std::vector<float> cpu_product(const std::vector<float>& x, int64_t m, const Fp8Inputs& in,
                               int64_t n, int64_t k, bool with_bias, ThreadPool& pool) {
  cpu::Fp8Weight fw;
  fw.w = in.codes.data();
  fw.n = n;
  fw.k = k;
  fw.row_scale = in.scales.data();
  std::vector<float> y(static_cast<size_t>(m * n));
  cpu::dequant_matmul(
      x.data(), m, k, n,
      [&](int64_t r0, int64_t r1, float* dst) { cpu::dequantize_rows(fw, r0, r1, dst); }, y.data(),
      n, pool);
  if (with_bias)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        y[static_cast<size_t>(i * n + j)] += in.bias.values[static_cast<size_t>(j)];
  return y;
}

TEST(CudaFp8, QuantizeRowsMatchesCpu) {
  REQUIRE_GPU();
  uint32_t seed = 7;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t m : kMs) {
      for (int64_t k : {int64_t{16}, int64_t{333}, int64_t{4096}}) {
        for (float static_scale : {0.0f, 0.01f}) {
          SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " m=" << m << " k=" << k
                                            << " static=" << static_scale);
          HalfData x = random_half(static_cast<size_t>(m * k), dt, seed++, -3.0f, 3.0f);
          if (m > 1) {  // a zero row: the activation rule's floor
            std::fill(x.bits.begin() + k, x.bits.begin() + 2 * k, uint16_t{0});
            std::fill(x.values.begin() + k, x.values.begin() + 2 * k, 0.0f);
          }
          const DeviceBuffer dx = to_device(x.bits);
          DeviceBuffer dq(static_cast<size_t>(m * k)), ds(static_cast<size_t>(m) * 4);
          CUDA_OK(quantize_fp8_rows(dx.get(), m, k, static_scale, Fp8ScaleRule::kActivation,
                                    dq.as<uint8_t>(), ds.as<float>(), dt, nullptr));
          CUDA_OK(cudaDeviceSynchronize());
          const auto q = to_host<uint8_t>(dq, static_cast<size_t>(m * k));
          const auto s = to_host<float>(ds, static_cast<size_t>(m));
          std::vector<float> ref(x.values.size());
          cpu::fake_quantize_fp8_rows(x.values.data(), m, k, static_scale, k, ref.data());
          size_t bad = 0;
          for (int64_t i = 0; i < m * k; ++i) {
            const float got =
                e4m3_to_float(q[static_cast<size_t>(i)]) * s[static_cast<size_t>(i / k)];
            bad += got != ref[static_cast<size_t>(i)];
          }
          EXPECT_EQ(bad, 0u);
          if (static_scale > 0) {
            EXPECT_EQ(s[0], static_scale);
          }
        }
      }
    }
    // The weight rule (--quantization fp8 at load): s = max|w| / 448, 1 for a zero row.
    const int64_t m = 5, k = 520;
    HalfData w = random_half(static_cast<size_t>(m * k), dt, seed++, -0.05f, 0.05f);
    std::fill(w.bits.begin(), w.bits.begin() + k, uint16_t{0});
    std::fill(w.values.begin(), w.values.begin() + k, 0.0f);
    const DeviceBuffer dw = to_device(w.bits);
    DeviceBuffer dq(static_cast<size_t>(m * k)), ds(static_cast<size_t>(m) * 4);
    CUDA_OK(quantize_fp8_rows(dw.get(), m, k, 0.0f, Fp8ScaleRule::kWeight, dq.as<uint8_t>(),
                              ds.as<float>(), dt, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const auto q = to_host<uint8_t>(dq, static_cast<size_t>(m * k));
    const auto s = to_host<float>(ds, static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) {
      float amax = 0;
      for (int64_t l = 0; l < k; ++l) amax = std::max(amax, std::fabs(w.values[r * k + l]));
      const float scale = amax > 0 ? amax / kE4M3Max : 1.0f;
      ASSERT_EQ(s[static_cast<size_t>(r)], scale) << "row " << r;
      for (int64_t l = 0; l < k; ++l)
        ASSERT_EQ(q[r * k + l], float_to_e4m3(w.values[r * k + l] / scale)) << r << ", " << l;
    }
  }
}

TEST(CudaFp8, GemvMatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  uint32_t seed = 100;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const KN s : kShapes) {
      if (s.k % 8 != 0) continue;  // the GEMV's 16-byte loads of x
      const Fp8Inputs w = random_fp8_weight(s.n, s.k, dt, seed++);
      for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{8}}) {
        const HalfData x = random_half(static_cast<size_t>(m * s.k), dt, seed++);
        const DeviceBuffer dx = to_device(x.bits);
        DeviceBuffer dy(static_cast<size_t>(m * s.n) * 2);
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " m=" << m << " k=" << s.k
                                            << " n=" << s.n << " bias=" << with_bias);
          poison(dy);
          CUDA_OK(linear_fp8_gemv(dx.get(), m, view(w, s.n, s.k, with_bias), dy.get(), GemvFusion{},
                                  dt, nullptr));
          CUDA_OK(cudaDeviceSynchronize());
          const auto got =
              halves_to_floats(to_host<uint16_t>(dy, static_cast<size_t>(m * s.n)), dt);
          const auto ref = cpu_product(x.values, m, w, s.n, s.k, with_bias, pool);
          EXPECT_LT(normalised_error(got, ref), tolerance(dt));
        }
      }
    }
  }
}

// The decode fusions around the FP8 GEMV: RMSNorm of x, the residual add, SiLU-and-mul.
TEST(CudaFp8, FusedGemvMatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  uint32_t seed = 300;
  const DType dt = DType::kBF16;
  const float eps = 1e-5f;
  for (const KN s : {KN{64, 48}, KN{4096, 512}, KN{136, 40}}) {
    const Fp8Inputs w = random_fp8_weight(s.n, s.k, dt, seed++);
    const HalfData gamma = random_half(static_cast<size_t>(s.k), dt, seed++, 0.5f, 1.5f);
    const DeviceBuffer dg = to_device(gamma.bits);
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{8}}) {
      const HalfData x = random_half(static_cast<size_t>(m * s.k), dt, seed++);
      const HalfData y0 = random_half(static_cast<size_t>(m * s.n), dt, seed++);
      const DeviceBuffer dx = to_device(x.bits);
      // The normalised input, in fp32 (the kernel never rounds it).
      std::vector<float> xn(x.values.size());
      for (int64_t i = 0; i < m; ++i) {
        double ss = 0;
        for (int64_t l = 0; l < s.k; ++l) ss += x.values[i * s.k + l] * x.values[i * s.k + l];
        const float inv = 1.0f / std::sqrt(static_cast<float>(ss / s.k) + eps);
        for (int64_t l = 0; l < s.k; ++l)
          xn[i * s.k + l] = x.values[i * s.k + l] * inv * gamma.values[l];
      }
      for (GemvEpilogue e :
           {GemvEpilogue::kStore, GemvEpilogue::kAccumulate, GemvEpilogue::kGatedSilu}) {
        SCOPED_TRACE(::testing::Message() << "m=" << m << " k=" << s.k << " n=" << s.n
                                          << " epilogue=" << static_cast<int>(e));
        GemvFusion f;
        f.norm_weight = e == GemvEpilogue::kAccumulate ? nullptr : dg.get();
        f.norm_eps = eps;
        f.epilogue = e;
        const std::vector<float>& input = f.norm_weight != nullptr ? xn : x.values;
        const auto prod = cpu_product(input, m, w, s.n, s.k, true, pool);
        std::vector<float> ref;
        DeviceBuffer dy;
        if (e == GemvEpilogue::kGatedSilu) {
          const int64_t half = s.n / 2;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < half; ++j) {
              const float g = prod[i * s.n + j], u = prod[i * s.n + half + j];
              ref.push_back(g / (1.0f + std::exp(-g)) * u);
            }
          dy = DeviceBuffer(static_cast<size_t>(m * half) * 2);
          poison(dy);
        } else {
          ref = prod;
          if (e == GemvEpilogue::kAccumulate) {
            for (size_t i = 0; i < ref.size(); ++i) ref[i] += y0.values[i];
            dy = to_device(y0.bits);
          } else {
            dy = DeviceBuffer(static_cast<size_t>(m * s.n) * 2);
            poison(dy);
          }
        }
        CUDA_OK(linear_fp8_gemv(dx.get(), m, view(w, s.n, s.k, true), dy.get(), f, dt, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        const auto got = halves_to_floats(to_host<uint16_t>(dy, ref.size()), dt);
        EXPECT_LT(normalised_error(got, ref), tolerance(dt));
      }
    }
  }
}

enum class Path { kDispatch, kCublasLt, kFallback };

TEST(CudaFp8, W8A8MatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  BlasContext ctx;
  CUDA_OK(blas_context_create(&ctx));
  uint32_t seed = 500;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const KN s : kShapes) {
      const Fp8Inputs w = random_fp8_weight(s.n, s.k, dt, seed++);
      for (int64_t m : kMs) {
        const HalfData x = random_half(static_cast<size_t>(m * s.k), dt, seed++);
        const DeviceBuffer dx = to_device(x.bits);
        DeviceBuffer dq(static_cast<size_t>(m * s.k)), ds(static_cast<size_t>(m) * 4);
        DeviceBuffer dy(static_cast<size_t>(m * s.n) * 2);
        for (float static_scale : {0.0f, 0.004f}) {
          std::vector<float> xq(x.values.size());
          cpu::fake_quantize_fp8_rows(x.values.data(), m, s.k, static_scale, s.k, xq.data());
          for (bool with_bias : {false, true}) {
            // The dispatch runs the weight-only GEMV at m <= 8: its reference is unquantized x.
            const auto ref_w8a8 = cpu_product(xq, m, w, s.n, s.k, with_bias, pool);
            const auto ref_w8a16 = cpu_product(x.values, m, w, s.n, s.k, with_bias, pool);
            for (Path path : {Path::kDispatch, Path::kCublasLt, Path::kFallback}) {
              SCOPED_TRACE(::testing::Message()
                           << dtype_label(dt) << " m=" << m << " k=" << s.k << " n=" << s.n
                           << " static=" << static_scale << " bias=" << with_bias
                           << " path=" << static_cast<int>(path));
              poison(dy);
              const Fp8WeightView v = view(w, s.n, s.k, with_bias);
              const bool gemv = path == Path::kDispatch && m <= kFp8GemvMaxM && s.k % 8 == 0;
              if (path == Path::kDispatch) {
                Fp8LinearParams p;
                p.x = dx.get();
                p.m = m;
                p.w = v;
                p.y = dy.get();
                p.dtype = dt;
                p.input_scale = static_scale;
                p.xq = dq.as<uint8_t>();
                p.x_scale = ds.as<float>();
                CUDA_OK(linear_fp8(ctx, p, nullptr));
              } else {
                CUDA_OK(quantize_fp8_rows(dx.get(), m, s.k, static_scale, Fp8ScaleRule::kActivation,
                                          dq.as<uint8_t>(), ds.as<float>(), dt, nullptr));
                if (path == Path::kCublasLt) {
                  const cudaError_t e = linear_fp8_cublaslt(ctx, dq.as<uint8_t>(), ds.as<float>(),
                                                            m, v, dy.get(), dt, nullptr);
                  if (e == cudaErrorNotSupported) {
                    // Only shapes with unaligned rows may lack an algorithm (the outer-vector
                    // scales themselves are CudaFp8.CublasLtTakesOuterVectorScales' business).
                    EXPECT_TRUE(s.k % 16 != 0 || s.n % 8 != 0)
                        << "cuBLASLt has no FP8 algorithm for a legal shape";
                    continue;
                  }
                  CUDA_OK(e);
                } else {
                  CUDA_OK(linear_fp8_fallback(dq.as<uint8_t>(), ds.as<float>(), m, v, dy.get(), dt,
                                              nullptr));
                }
              }
              CUDA_OK(cudaDeviceSynchronize());
              const auto got =
                  halves_to_floats(to_host<uint16_t>(dy, static_cast<size_t>(m * s.n)), dt);
              EXPECT_LT(normalised_error(got, gemv ? ref_w8a16 : ref_w8a8), tolerance(dt));
            }
          }
        }
      }
    }
  }
  blas_context_destroy(&ctx);
}

// The fast path of prefill: cuBLASLt must take outer-vector (per-row and per-token) scales for
// e4m3 on this GPU, else every W8A8 projection runs the slow fallback.
TEST(CudaFp8, CublasLtTakesOuterVectorScales) {
  REQUIRE_GPU();
  BlasContext ctx;
  CUDA_OK(blas_context_create(&ctx));
  const int64_t m = 64, k = 4096, n = 512;
  const Fp8Inputs w = random_fp8_weight(n, k, DType::kBF16, 9);
  DeviceBuffer dq(static_cast<size_t>(m * k)), ds(static_cast<size_t>(m) * 4);
  CUDA_OK(cudaMemset(dq.get(), 0x38, dq.bytes()));  // 1.0
  const std::vector<float> ones(static_cast<size_t>(m), 1.0f);
  CUDA_OK(cudaMemcpy(ds.get(), ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
  DeviceBuffer dy(static_cast<size_t>(m * n) * 2);
  EXPECT_EQ(linear_fp8_cublaslt(ctx, dq.as<uint8_t>(), ds.as<float>(), m, view(w, n, k, false),
                                dy.get(), DType::kBF16, nullptr),
            cudaSuccess)
      << "cuBLASLt " << cublasLtGetVersion()
      << " runs no e4m3 GEMM with CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F here";
  CUDA_OK(cudaDeviceSynchronize());
  blas_context_destroy(&ctx);
}

}  // namespace
}  // namespace pagoda::cuda
