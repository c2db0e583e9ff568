// The W4A16 kernels (kernels/cuda/linear_w4.h) against the CPU reference dequantization of the
// checkpoint formats (kernels/cpu/quant_dequant.h), through the host repack
// (kernels/cpu/int4_repack.h):
//  - dequantize_w4: bit for bit the reference weights rounded once to bf16 / f16;
//  - linear_w4_gemv (m = 1..8) and linear_w4's dispatch (m = 20: the GEMV 8 rows at a time;
//    m = 64, 257: dequantize + GEMM): the CPU product over the reference weights
//    (cpu::dequant_matmul), with and without bias;
//  - the fusions (norm, residual add, SiLU-and-mul), with and without act-order (the gather);
//  - gather_columns against the host gather.
// Weight grid: GPTQ and AWQ, groups 32 / 64 / 128 / per-channel, symmetric and asymmetric,
// act-order on and off (GPTQ); shapes k 128..4096, n 64..4096. Every failure names its case.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "cuda_test_util.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cuda/linear_w4.h"
#include "w4_test_weights.h"

namespace pagoda::cuda {
namespace {

using namespace testing;  // NOLINT
using cpu::testing::random_w4;
using cpu::testing::RandomW4;
using cpu::testing::W4Case;

struct KN {
  int64_t k, n;
};
const KN kShapes[] = {{128, 64}, {384, 200}, {4096, 512}, {1024, 4096}};

/// Every weight configuration of the grid for a shape (groups that divide k).
std::vector<W4Case> weight_cases(const KN& s) {
  std::vector<W4Case> out;
  for (const bool awq : {false, true})
    for (const int64_t group : {32, 64, 128, -1})
      for (const bool sym : {true, false})
        for (const bool act : {false, true}) {
          if ((awq && act) || (group > 0 && s.k % group != 0)) continue;
          out.push_back(W4Case{awq, s.n, s.k, group, sym, act});
        }
  return out;
}

/// A weight on the host (reference) and the device (W4 layout).
struct DeviceW4 {
  RandomW4 src;
  cpu::W4Layout layout;
  std::vector<float> dense;  // [n, k] reference weights
  HalfData bias;             // [n]
  DeviceBuffer qweight, meta, perm, bias_dev;

  W4WeightView view(bool with_bias) const {
    W4WeightView v;
    v.qweight = qweight.as<uint32_t>();
    v.meta = meta.as<uint32_t>();
    v.perm = layout.perm.empty() ? nullptr : perm.as<int32_t>();
    v.bias = with_bias ? bias_dev.get() : nullptr;
    v.n = layout.n;
    v.k = layout.k;
    v.group_size = layout.group_size;
    return v;
  }
};

DeviceW4 upload(const W4Case& c, DType dt, uint32_t seed) {
  DeviceW4 w;
  w.src = random_w4(c, seed);
  w.layout = w.src.layout();
  w.dense = w.src.dense();
  w.bias = random_half(static_cast<size_t>(c.n), dt, seed + 1);
  w.qweight = to_device(w.layout.qweight);
  w.meta = to_device(w.layout.meta);
  w.perm = to_device(w.layout.perm);
  w.bias_dev = to_device(w.bias.bits);
  return w;
}

/// y = x W^T (+ bias) on the CPU over the reference weights.
std::vector<float> cpu_product(const std::vector<float>& x, int64_t m, const DeviceW4& w,
                               bool with_bias, ThreadPool& pool) {
  const int64_t n = w.layout.n, k = w.layout.k;
  std::vector<float> y(static_cast<size_t>(m * n));
  cpu::dequant_matmul(
      x.data(), m, k, n,
      [&](int64_t r0, int64_t r1, float* dst) {
        std::copy(w.dense.begin() + r0 * k, w.dense.begin() + r1 * k, dst);
      },
      y.data(), n, pool);
  if (with_bias)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        y[static_cast<size_t>(i * n + j)] += w.bias.values[static_cast<size_t>(j)];
  return y;
}

TEST(CudaW4, DequantizeIsTheReferenceRoundedOnce) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const KN s : {KN{128, 64}, KN{384, 200}, KN{1024, 256}}) {
      for (const W4Case& c : weight_cases(s)) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " " << c.name());
        const DeviceW4 w = upload(c, dt, seed++);
        DeviceBuffer dense(static_cast<size_t>(s.n * s.k) * 2);
        poison(dense);
        CUDA_OK(dequantize_w4(w.view(false), dense.get(), dt, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        const auto got = to_host<uint16_t>(dense, static_cast<size_t>(s.n * s.k));
        for (int64_t i = 0; i < s.n * s.k; ++i) {
          ASSERT_EQ(got[static_cast<size_t>(i)], float_to_half(w.dense[static_cast<size_t>(i)], dt))
              << "element (" << i / s.k << ", " << i % s.k << "): reference "
              << w.dense[static_cast<size_t>(i)];
        }
      }
    }
  }
}

TEST(CudaW4, GemvMatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  uint32_t seed = 100;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const KN s : kShapes) {
      for (const W4Case& c : weight_cases(s)) {
        const DeviceW4 w = upload(c, dt, seed++);
        for (int64_t m = 1; m <= kW4GemvMaxM; ++m) {
          const HalfData x = random_half(static_cast<size_t>(m * s.k), dt, seed++);
          const DeviceBuffer dx = to_device(x.bits);
          DeviceBuffer dy(static_cast<size_t>(m * s.n) * 2);
          DeviceBuffer scratch(static_cast<size_t>(m * s.k) * 2);
          const bool with_bias = m % 2 == 1;
          SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " " << c.name() << " m=" << m
                                            << " bias=" << with_bias);
          poison(dy);
          CUDA_OK(linear_w4_gemv(dx.get(), m, w.view(with_bias), dy.get(), GemvFusion{},
                                 scratch.get(), dt, nullptr));
          CUDA_OK(cudaDeviceSynchronize());
          const auto got =
              halves_to_floats(to_host<uint16_t>(dy, static_cast<size_t>(m * s.n)), dt);
          const auto ref = cpu_product(x.values, m, w, with_bias, pool);
          ASSERT_LT(normalised_error(got, ref), tolerance(dt));
        }
      }
    }
  }
}

// The dispatch past the GEMV's m: 8 rows at a time (m = 20) and the large-m path (dequantize into
// the dense scratch, then the dense GEMM: m = 64, 257).
TEST(CudaW4, PrefillMatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  BlasContext ctx;
  CUDA_OK(blas_context_create(&ctx));
  uint32_t seed = 500;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const KN s : kShapes) {
      for (const W4Case& c : weight_cases(s)) {
        // The weights' grid at m = 20 and 64 on every shape; m = 257 on the two small shapes.
        for (const int64_t m : {int64_t{20}, int64_t{64}, int64_t{257}}) {
          if (m == 257 && s.k * s.n > 384 * 200) continue;
          const DeviceW4 w = upload(c, dt, seed++);
          const HalfData x = random_half(static_cast<size_t>(m * s.k), dt, seed++);
          const DeviceBuffer dx = to_device(x.bits);
          DeviceBuffer dy(static_cast<size_t>(m * s.n) * 2);
          DeviceBuffer dense(static_cast<size_t>(s.n * s.k) * 2);
          DeviceBuffer scratch(static_cast<size_t>(kW4GemvMaxM * s.k) * 2);
          const bool with_bias = seed % 2 == 0;
          SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " " << c.name() << " m=" << m
                                            << " bias=" << with_bias);
          poison(dy);
          W4LinearParams p;
          p.x = dx.get();
          p.m = m;
          p.w = w.view(with_bias);
          p.y = dy.get();
          p.dtype = dt;
          p.dense = dense.get();
          p.x_scratch = scratch.get();
          CUDA_OK(linear_w4(ctx, p, nullptr));
          CUDA_OK(cudaDeviceSynchronize());
          const auto got =
              halves_to_floats(to_host<uint16_t>(dy, static_cast<size_t>(m * s.n)), dt);
          const auto ref = cpu_product(x.values, m, w, with_bias, pool);
          ASSERT_LT(normalised_error(got, ref), tolerance(dt));
        }
      }
    }
  }
  blas_context_destroy(&ctx);
}

// The decode fusions around the W4 GEMV: RMSNorm of x (in the kernel, or in the act-order gather),
// the residual add, SiLU-and-mul.
TEST(CudaW4, FusedGemvMatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  uint32_t seed = 300;
  const DType dt = DType::kBF16;
  const float eps = 1e-5f;
  for (const KN s : {KN{128, 64}, KN{4096, 512}}) {
    for (const bool act : {false, true}) {
      const W4Case c{false, s.n, s.k, 128, false, act};
      const DeviceW4 w = upload(c, dt, seed++);
      const HalfData gamma = random_half(static_cast<size_t>(s.k), dt, seed++, 0.5f, 1.5f);
      const DeviceBuffer dg = to_device(gamma.bits);
      for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{8}}) {
        const HalfData x = random_half(static_cast<size_t>(m * s.k), dt, seed++);
        const HalfData y0 = random_half(static_cast<size_t>(m * s.n), dt, seed++);
        const DeviceBuffer dx = to_device(x.bits);
        DeviceBuffer scratch(static_cast<size_t>(m * s.k) * 2);
        std::vector<float> xn(x.values.size());  // normalised, in fp32
        for (int64_t i = 0; i < m; ++i) {
          double ss = 0;
          for (int64_t l = 0; l < s.k; ++l) ss += x.values[i * s.k + l] * x.values[i * s.k + l];
          const float inv = 1.0f / std::sqrt(static_cast<float>(ss / s.k) + eps);
          for (int64_t l = 0; l < s.k; ++l)
            xn[i * s.k + l] = x.values[i * s.k + l] * inv * gamma.values[l];
        }
        for (GemvEpilogue e :
             {GemvEpilogue::kStore, GemvEpilogue::kAccumulate, GemvEpilogue::kGatedSilu}) {
          SCOPED_TRACE(::testing::Message()
                       << c.name() << " m=" << m << " epilogue=" << static_cast<int>(e));
          GemvFusion f;
          f.norm_weight = e == GemvEpilogue::kAccumulate ? nullptr : dg.get();
          f.norm_eps = eps;
          f.epilogue = e;
          const std::vector<float>& input = f.norm_weight != nullptr ? xn : x.values;
          const auto prod = cpu_product(input, m, w, true, pool);
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
          CUDA_OK(
              linear_w4_gemv(dx.get(), m, w.view(true), dy.get(), f, scratch.get(), dt, nullptr));
          CUDA_OK(cudaDeviceSynchronize());
          const auto got = halves_to_floats(to_host<uint16_t>(dy, ref.size()), dt);
          EXPECT_LT(normalised_error(got, ref), tolerance(dt));
        }
      }
    }
  }
}

TEST(CudaW4, GatherColumnsMatchesHost) {
  REQUIRE_GPU();
  const DType dt = DType::kBF16;
  const int64_t m = 3, k = 384;
  const RandomW4 r = random_w4(W4Case{false, 8, k, 64, true, true}, 9);
  std::vector<int32_t> perm;
  ASSERT_TRUE(cpu::w4_permutation(r.g_idx.data(), k, 64, &perm));
  ASSERT_FALSE(perm.empty());
  const HalfData x = random_half(static_cast<size_t>(m * k), dt, 10);
  const DeviceBuffer dx = to_device(x.bits), dp = to_device(perm);
  DeviceBuffer out(static_cast<size_t>(m * k) * 2);
  poison(out);
  CUDA_OK(gather_columns(dx.get(), m, k, dp.as<int32_t>(), nullptr, 0.0f, out.get(), dt, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = to_host<uint16_t>(out, static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      ASSERT_EQ(got[static_cast<size_t>(i * k + p)],
                x.bits[static_cast<size_t>(i * k + perm[static_cast<size_t>(p)])])
          << "row " << i << " position " << p;
}

TEST(CudaW4, RejectsWhatTheKernelsCannotRead) {
  REQUIRE_GPU();
  const DType dt = DType::kBF16;
  const DeviceW4 w = upload(W4Case{false, 64, 256, 64, true, true}, dt, 20);
  const HalfData x = random_half(256, dt, 21);
  const DeviceBuffer dx = to_device(x.bits);
  DeviceBuffer dy(64 * 2), scratch(256 * 2);
  W4WeightView v = w.view(false);
  // Act-order without a scratch for the gathered x.
  EXPECT_EQ(linear_w4_gemv(dx.get(), 1, v, dy.get(), GemvFusion{}, nullptr, dt, nullptr),
            cudaErrorInvalidValue);
  // m past the GEMV's limit.
  EXPECT_EQ(linear_w4_gemv(dx.get(), kW4GemvMaxM + 1, v, dy.get(), GemvFusion{}, scratch.get(), dt,
                           nullptr),
            cudaErrorInvalidValue);
  // A group size that is not a multiple of the 32-code chunk.
  v.group_size = 16;
  EXPECT_FALSE(w4_view_valid(v));
  EXPECT_EQ(linear_w4_gemv(dx.get(), 1, v, dy.get(), GemvFusion{}, scratch.get(), dt, nullptr),
            cudaErrorInvalidValue);
  CUDA_OK(cudaGetLastError());
}

}  // namespace
}  // namespace pagoda::cuda
