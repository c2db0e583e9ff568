// The INT8 W8A8 kernels (kernels/cuda/linear_int8.h) against the CPU reference of
// kernels/cpu/quant_gemm.h (quantize_int8_rows, int8_matmul):
//  - quantize_int8_rows: the same int8 codes and scales, bit for bit (per token, static, a zero
//    row; the register path and the strided one); with the fused RMSNorm, the codes of the
//    normalised row to within one step;
//  - exact int32 sums: cuBLASLt's int32 product equals the CPU's; the GEMV and the fallback, with
//    unit scales and f16 outputs (every integer up to 2048 is an f16 value), return the sums
//    themselves;
//  - the W8A8 product (linear_int8's dispatch, cuBLASLt + the scale epilogue, the fallback): the
//    CPU's int8_matmul to within the dtype's rounding, bf16 and f16, with and without bias;
//  - the GEMV's decode fusions (norm before the quantization, residual add, SiLU-and-mul);
//  - the dummy INT8 codes of fill_uniform: the CPU's (model/dummy_weights.cc).
// Shapes: m in {1, 3, 8, 64, 300, 1100} (1100: two cuBLASLt calls of kInt8GemmRows); k and n
// multiples of 16 and not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/splitmix64.h"
#include "core/thread_pool.h"
#include "cuda_test_util.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cuda/linear_int8.h"
#include "kernels/cuda/tensor_ops.h"

namespace pagoda::cuda {
namespace {

using namespace testing;  // NOLINT

const int64_t kMs[] = {1, 3, 8, 64, 300, 1100};
struct KN {
  int64_t k, n;
};
// cuBLASLt-legal (k % 16 == 0, n % 4 == 0) and not: odd n, k % 16 == 8, odd k (fallback only).
const KN kShapes[] = {{64, 48}, {4096, 512}, {1024, 1000}, {520, 37}, {136, 40}, {333, 129}};

/// The bound on max |got - ref| / max |ref| when only the final rounding to dtype differs.
double rounding(DType dt) { return dt == DType::kBF16 ? 4e-3 : 1e-3; }

/// A random INT8 weight [n, k]: codes in [-lim, lim], per-row scales, a bias; host and device.
struct Int8Inputs {
  std::vector<int8_t> codes;  // [n, k]
  std::vector<int32_t> sums;  // [n]: each row's sum (cpu::int8_matmul's VNNI offset)
  std::vector<float> scales;  // [n]
  HalfData bias;              // [n]
  DeviceBuffer dw, ds, db;
};
Int8Inputs random_int8_weight(int64_t n, int64_t k, DType dt, uint32_t seed, int lim = 127,
                              bool unit_scales = false) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> code(-lim, lim);
  std::uniform_real_distribution<float> scale(1e-4f, 4e-3f);
  Int8Inputs in;
  in.codes.resize(static_cast<size_t>(n * k));
  in.sums.assign(static_cast<size_t>(n), 0);
  in.scales.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t l = 0; l < k; ++l) {
      const auto c = static_cast<int8_t>(code(gen));
      in.codes[static_cast<size_t>(j * k + l)] = c;
      in.sums[static_cast<size_t>(j)] += c;
    }
    in.scales[static_cast<size_t>(j)] = unit_scales ? 1.0f : scale(gen);
  }
  in.bias = random_half(static_cast<size_t>(n), dt, seed + 1);
  in.dw = to_device(in.codes);
  in.ds = to_device(in.scales);
  in.db = to_device(in.bias.bits);
  return in;
}

Int8WeightView view(const Int8Inputs& in, int64_t n, int64_t k, bool with_bias) {
  Int8WeightView v;
  v.w = in.dw.as<int8_t>();
  v.scale = in.ds.as<float>();
  v.bias = with_bias ? in.db.get() : nullptr;
  v.n = n;
  v.k = k;
  return v;
}

/// The CPU's W8A8 product of fp32 x: quantize_int8_rows, then int8_matmul (+ bias).
std::vector<float> cpu_w8a8(const std::vector<float>& x, int64_t m, const Int8Inputs& in, int64_t n,
                            int64_t k, float static_scale, bool with_bias, ThreadPool& pool) {
  std::vector<int8_t> qx(x.size());
  std::vector<float> sx(static_cast<size_t>(m));
  cpu::quantize_int8_rows(x.data(), m, k, static_scale, qx.data(), sx.data());
  cpu::Int8MatmulParams p;
  p.qx = qx.data();
  p.x_scale = sx.data();
  p.m = m;
  p.k = k;
  p.qw = in.codes.data();
  p.w_row_sums = in.sums.data();
  p.w_scale = in.scales.data();
  p.bias = with_bias ? in.bias.values.data() : nullptr;
  p.n = n;
  std::vector<float> y(static_cast<size_t>(m * n));
  p.y = y.data();
  p.ldy = n;
  cpu::int8_matmul(p, pool);
  return y;
}

Int8QuantizeParams quantize_params(const DeviceBuffer& x, int64_t m, int64_t k, float static_scale,
                                   DeviceBuffer& q, DeviceBuffer& s, DType dt) {
  Int8QuantizeParams p;
  p.x = x.get();
  p.m = m;
  p.k = k;
  p.static_scale = static_scale;
  p.q = q.as<int8_t>();
  p.x_scale = s.as<float>();
  p.dtype = dt;
  return p;
}

TEST(CudaInt8, QuantizeRowsMatchesCpu) {
  REQUIRE_GPU();
  uint32_t seed = 7;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t m : kMs) {
      // The register path (k % 8 == 0, k <= 16384: 1, 2 or 4 vectors per thread) and the strided
      // one (333, 20000).
      for (int64_t k : {int64_t{16}, int64_t{333}, int64_t{4096}, int64_t{6000}, int64_t{14336},
                        int64_t{20000}}) {
        if (k > 4096 && m > 64) continue;
        for (float static_scale : {0.0f, 0.02f}) {
          SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " m=" << m << " k=" << k
                                            << " static=" << static_scale);
          // +-3 with a static scale of 0.02: codes saturate at +-127 / -128.
          HalfData x = random_half(static_cast<size_t>(m * k), dt, seed++, -3.0f, 3.0f);
          if (m > 1) {  // a zero row: q = 0, s = 0
            std::fill(x.bits.begin() + k, x.bits.begin() + 2 * k, uint16_t{0});
            std::fill(x.values.begin() + k, x.values.begin() + 2 * k, 0.0f);
          }
          const DeviceBuffer dx = to_device(x.bits);
          DeviceBuffer dq(static_cast<size_t>(m * k)), ds(static_cast<size_t>(m) * 4);
          CUDA_OK(quantize_int8_rows(quantize_params(dx, m, k, static_scale, dq, ds, dt), nullptr));
          CUDA_OK(cudaDeviceSynchronize());
          const auto q = to_host<int8_t>(dq, static_cast<size_t>(m * k));
          const auto s = to_host<float>(ds, static_cast<size_t>(m));
          std::vector<int8_t> ref_q(x.values.size());
          std::vector<float> ref_s(static_cast<size_t>(m));
          cpu::quantize_int8_rows(x.values.data(), m, k, static_scale, ref_q.data(), ref_s.data());
          EXPECT_EQ(s, ref_s);
          size_t bad = 0;
          for (size_t i = 0; i < q.size(); ++i) bad += q[i] != ref_q[i];
          EXPECT_EQ(bad, 0u);
        }
      }
    }
  }
}

// With the RMSNorm fused: the normalised row in fp32, quantized. The CPU normalises in another
// summation order (1 / rms may differ in its last bit), so a code may move by one step.
TEST(CudaInt8, QuantizeRowsWithNormMatchesCpu) {
  REQUIRE_GPU();
  const float eps = 1e-5f;
  uint32_t seed = 40;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t m : {int64_t{1}, int64_t{5}}) {
      for (int64_t k : {int64_t{136}, int64_t{333}, int64_t{4096}, int64_t{14336}}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " m=" << m << " k=" << k);
        const HalfData x = random_half(static_cast<size_t>(m * k), dt, seed++, -2.0f, 2.0f);
        const HalfData g = random_half(static_cast<size_t>(k), dt, seed++, 0.5f, 1.5f);
        const DeviceBuffer dx = to_device(x.bits), dg = to_device(g.bits);
        DeviceBuffer dq(static_cast<size_t>(m * k)), ds(static_cast<size_t>(m) * 4);
        Int8QuantizeParams p = quantize_params(dx, m, k, 0.0f, dq, ds, dt);
        p.norm_weight = dg.get();
        p.norm_eps = eps;
        CUDA_OK(quantize_int8_rows(p, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        const auto q = to_host<int8_t>(dq, static_cast<size_t>(m * k));
        const auto s = to_host<float>(ds, static_cast<size_t>(m));
        std::vector<float> xn(x.values.size());
        for (int64_t i = 0; i < m; ++i) {
          double ss = 0;
          for (int64_t l = 0; l < k; ++l) ss += x.values[i * k + l] * x.values[i * k + l];
          const float inv = 1.0f / std::sqrt(static_cast<float>(ss / k) + eps);
          for (int64_t l = 0; l < k; ++l) xn[i * k + l] = x.values[i * k + l] * inv * g.values[l];
        }
        std::vector<int8_t> ref_q(xn.size());
        std::vector<float> ref_s(static_cast<size_t>(m));
        cpu::quantize_int8_rows(xn.data(), m, k, 0.0f, ref_q.data(), ref_s.data());
        for (int64_t i = 0; i < m; ++i) EXPECT_NEAR(s[i], ref_s[i], 1e-5 * ref_s[i]) << "row " << i;
        int worst = 0;
        size_t moved = 0;
        for (size_t i = 0; i < q.size(); ++i) {
          worst = std::max(worst, std::abs(int{q[i]} - int{ref_q[i]}));
          moved += q[i] != ref_q[i];
        }
        EXPECT_LE(worst, 1);
        EXPECT_LE(moved, q.size() / 100 + 2);
      }
    }
  }
}

// The integer sums themselves: cuBLASLt's int32 output against the CPU's, and the GEMV's and the
// fallback's with unit scales in f16 (codes small enough that every sum is below 2048).
TEST(CudaInt8, SumsAreExact) {
  REQUIRE_GPU();
  BlasContext ctx;
  CUDA_OK(blas_context_create(&ctx));
  uint32_t seed = 60;
  for (const KN s : {KN{64, 48}, KN{4096, 512}, KN{520, 40}, KN{136, 37}}) {
    const int lim = s.k <= 136 ? 5 : 1;  // |sum| <= 136 * 25 (k <= 136), else a +-1 random walk
    const Int8Inputs w = random_int8_weight(s.n, s.k, DType::kF16, seed++, lim, true);
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{64}}) {
      SCOPED_TRACE(::testing::Message() << "m=" << m << " k=" << s.k << " n=" << s.n);
      std::mt19937 gen(seed++);
      std::uniform_int_distribution<int> code(-lim, lim);
      std::vector<int8_t> xq(static_cast<size_t>(m * s.k));
      for (int8_t& c : xq) c = static_cast<int8_t>(code(gen));
      std::vector<int32_t> ref(static_cast<size_t>(m * s.n), 0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < s.n; ++j)
          for (int64_t l = 0; l < s.k; ++l)
            ref[i * s.n + j] += int32_t{xq[i * s.k + l]} * int32_t{w.codes[j * s.k + l]};
      const DeviceBuffer dq = to_device(xq);
      const DeviceBuffer dones = to_device(std::vector<float>(static_cast<size_t>(m), 1.0f));
      const Int8WeightView v = view(w, s.n, s.k, false);
      if (s.k % 16 == 0 && s.n % 4 == 0) {
        DeviceBuffer acc(static_cast<size_t>(m * s.n) * 4);
        CUDA_OK(int8_gemm_cublaslt(ctx, dq.as<int8_t>(), m, v, acc.as<int32_t>(), nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(to_host<int32_t>(acc, ref.size()), ref) << "cuBLASLt";
      }
      DeviceBuffer dy(static_cast<size_t>(m * s.n) * 2);
      for (bool gemv : {true, false}) {
        if (gemv && (m > kInt8GemvMaxM || s.k % 8 != 0)) continue;
        poison(dy);
        if (gemv) {
          CUDA_OK(linear_int8_gemv(dq.as<int8_t>(), dones.as<float>(), m, v, dy.get(), GemvFusion{},
                                   DType::kF16, nullptr));
        } else {
          CUDA_OK(linear_int8_fallback(dq.as<int8_t>(), dones.as<float>(), m, v, dy.get(),
                                       DType::kF16, nullptr));
        }
        CUDA_OK(cudaDeviceSynchronize());
        const auto got = halves_to_floats(to_host<uint16_t>(dy, ref.size()), DType::kF16);
        size_t bad = 0;
        for (size_t i = 0; i < ref.size(); ++i) bad += got[i] != static_cast<float>(ref[i]);
        EXPECT_EQ(bad, 0u) << (gemv ? "GEMV" : "fallback");
      }
    }
  }
  blas_context_destroy(&ctx);
}

enum class Path { kDispatch, kCublasLt, kFallback };

TEST(CudaInt8, W8A8MatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  BlasContext ctx;
  CUDA_OK(blas_context_create(&ctx));
  uint32_t seed = 500;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const KN s : kShapes) {
      const Int8Inputs w = random_int8_weight(s.n, s.k, dt, seed++);
      for (int64_t m : kMs) {
        // Two GEMM calls (m > kInt8GemmRows) on the small shapes only: the CPU reference's time.
        if (m > kInt8GemmRows && s.k * s.n > 100000) continue;
        const HalfData x = random_half(static_cast<size_t>(m * s.k), dt, seed++);
        const DeviceBuffer dx = to_device(x.bits);
        DeviceBuffer dq(static_cast<size_t>(m * s.k)), ds(static_cast<size_t>(m) * 4);
        DeviceBuffer dy(static_cast<size_t>(m * s.n) * 2);
        DeviceBuffer acc(static_cast<size_t>(std::min(m, kInt8GemmRows) * s.n) * 4);
        for (float static_scale : {0.0f, 0.01f}) {
          for (bool with_bias : {false, true}) {
            const auto ref = cpu_w8a8(x.values, m, w, s.n, s.k, static_scale, with_bias, pool);
            for (Path path : {Path::kDispatch, Path::kCublasLt, Path::kFallback}) {
              SCOPED_TRACE(::testing::Message()
                           << dtype_label(dt) << " m=" << m << " k=" << s.k << " n=" << s.n
                           << " static=" << static_scale << " bias=" << with_bias
                           << " path=" << static_cast<int>(path));
              poison(dy);
              const Int8WeightView v = view(w, s.n, s.k, with_bias);
              if (path == Path::kDispatch) {
                Int8LinearParams p;
                p.x = dx.get();
                p.m = m;
                p.w = v;
                p.y = dy.get();
                p.dtype = dt;
                p.input_scale = static_scale;
                p.xq = dq.as<int8_t>();
                p.x_scale = ds.as<float>();
                p.acc = acc.as<int32_t>();
                CUDA_OK(linear_int8(ctx, p, nullptr));
              } else {
                CUDA_OK(quantize_int8_rows(quantize_params(dx, m, s.k, static_scale, dq, ds, dt),
                                           nullptr));
                if (path == Path::kCublasLt) {
                  if (m > kInt8GemmRows) continue;  // one call; the dispatch splits larger m
                  const cudaError_t e =
                      int8_gemm_cublaslt(ctx, dq.as<int8_t>(), m, v, acc.as<int32_t>(), nullptr);
                  if (e == cudaErrorNotSupported) {
                    EXPECT_TRUE(s.k % 16 != 0 || s.n % 4 != 0)
                        << "cuBLASLt has no INT8 algorithm for a legal shape";
                    continue;
                  }
                  CUDA_OK(e);
                  CUDA_OK(int8_scale_epilogue(acc.as<int32_t>(), ds.as<float>(), m, v, dy.get(), dt,
                                              nullptr));
                } else {
                  CUDA_OK(linear_int8_fallback(dq.as<int8_t>(), ds.as<float>(), m, v, dy.get(), dt,
                                               nullptr));
                }
              }
              CUDA_OK(cudaDeviceSynchronize());
              const auto got =
                  halves_to_floats(to_host<uint16_t>(dy, static_cast<size_t>(m * s.n)), dt);
              EXPECT_LT(normalised_error(got, ref), rounding(dt));
            }
          }
        }
      }
    }
  }
  blas_context_destroy(&ctx);
}

// The decode fusions: the norm in the quantization, then the GEMV's residual add or SiLU-and-mul.
TEST(CudaInt8, FusedGemvMatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(8);
  uint32_t seed = 300;
  const DType dt = DType::kBF16;
  const float eps = 1e-5f;
  for (const KN s : {KN{64, 48}, KN{4096, 512}, KN{136, 40}}) {
    const Int8Inputs w = random_int8_weight(s.n, s.k, dt, seed++);
    const HalfData gamma = random_half(static_cast<size_t>(s.k), dt, seed++, 0.5f, 1.5f);
    const DeviceBuffer dg = to_device(gamma.bits);
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{8}}) {
      const HalfData x = random_half(static_cast<size_t>(m * s.k), dt, seed++);
      const HalfData y0 = random_half(static_cast<size_t>(m * s.n), dt, seed++);
      const DeviceBuffer dx = to_device(x.bits);
      std::vector<float> xn(x.values.size());
      for (int64_t i = 0; i < m; ++i) {
        double ss = 0;
        for (int64_t l = 0; l < s.k; ++l) ss += x.values[i * s.k + l] * x.values[i * s.k + l];
        const float inv = 1.0f / std::sqrt(static_cast<float>(ss / s.k) + eps);
        for (int64_t l = 0; l < s.k; ++l)
          xn[i * s.k + l] = x.values[i * s.k + l] * inv * gamma.values[l];
      }
      DeviceBuffer dq(static_cast<size_t>(m * s.k)), ds(static_cast<size_t>(m) * 4);
      for (GemvEpilogue e :
           {GemvEpilogue::kStore, GemvEpilogue::kAccumulate, GemvEpilogue::kGatedSilu}) {
        SCOPED_TRACE(::testing::Message() << "m=" << m << " k=" << s.k << " n=" << s.n
                                          << " epilogue=" << static_cast<int>(e));
        const bool norm = e != GemvEpilogue::kAccumulate;
        Int8QuantizeParams qp = quantize_params(dx, m, s.k, 0.0f, dq, ds, dt);
        qp.norm_weight = norm ? dg.get() : nullptr;
        qp.norm_eps = eps;
        const auto prod = cpu_w8a8(norm ? xn : x.values, m, w, s.n, s.k, 0.0f, true, pool);
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
        GemvFusion f;
        f.epilogue = e;
        CUDA_OK(quantize_int8_rows(qp, nullptr));
        CUDA_OK(linear_int8_gemv(dq.as<int8_t>(), ds.as<float>(), m, view(w, s.n, s.k, true),
                                 dy.get(), f, dt, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        const auto got = halves_to_floats(to_host<uint16_t>(dy, ref.size()), dt);
        // A code moved by one step (the norm's last bit) changes a product by ~1/127 of one term.
        EXPECT_LT(normalised_error(got, ref), tolerance(dt));
      }
      // The norm belongs to the quantization: the GEMV refuses it.
      GemvFusion with_norm;
      with_norm.norm_weight = dg.get();
      DeviceBuffer dy(static_cast<size_t>(m * s.n) * 2);
      EXPECT_EQ(linear_int8_gemv(dq.as<int8_t>(), ds.as<float>(), m, view(w, s.n, s.k, true),
                                 dy.get(), with_norm, dt, nullptr),
                cudaErrorInvalidValue);
    }
  }
}

// cuBLASLt must run int8 x int8 -> int32 in the plain "TN" layout on this GPU, else every INT8
// prefill projection runs the slow fallback.
TEST(CudaInt8, CublasLtRunsImma) {
  REQUIRE_GPU();
  BlasContext ctx;
  CUDA_OK(blas_context_create(&ctx));
  const int64_t m = 64, k = 4096, n = 512;
  const Int8Inputs w = random_int8_weight(n, k, DType::kBF16, 9);
  DeviceBuffer dq(static_cast<size_t>(m * k)), acc(static_cast<size_t>(m * n) * 4);
  CUDA_OK(cudaMemset(dq.get(), 1, dq.bytes()));
  EXPECT_EQ(
      int8_gemm_cublaslt(ctx, dq.as<int8_t>(), m, view(w, n, k, false), acc.as<int32_t>(), nullptr),
      cudaSuccess)
      << "cuBLASLt " << cublasLtGetVersion() << " runs no int8 TN GEMM here";
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = to_host<int32_t>(acc, static_cast<size_t>(m * n));
  for (int64_t j = 0; j < n; ++j) ASSERT_EQ(got[j], w.sums[j]) << "column " << j;  // x = 1
  blas_context_destroy(&ctx);
}

// --load-format dummy's INT8 codes drawn on the device: model/dummy_weights.cc's, value for value.
TEST(CudaInt8, DummyCodesMatchCpu) {
  REQUIRE_GPU();
  const int64_t count = 100003;
  const uint64_t seed = 0x1234;
  DeviceBuffer d(static_cast<size_t>(count));
  CUDA_OK(fill_uniform(d.get(), DType::kI8, count, seed, 0.0f, 127.0f, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = to_host<int8_t>(d, static_cast<size_t>(count));
  size_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t h = splitmix64(seed + static_cast<uint64_t>(i));
    const auto u = static_cast<float>(static_cast<double>(h >> 40) / 8388608.0 - 1.0);
    const double v = 127.0 * u;
    bad += got[i] != static_cast<int8_t>(std::clamp(std::nearbyint(v), -127.0, 127.0));
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace pagoda::cuda
