// Tests of cpu::linear against an fp64 reference.
//
// How to add a case: extend one of the grids below (kRows, kSizes, the dtype list) or add a
// LinearCase to the list in LargeShapes. Every case is checked with the normalised error bound
// max|y - ref| / max|ref| <= kTolerance, through linear() and through each of its paths
// (streaming; oneDNN exact through widened weights or three bf16 terms of x, and with rounded bf16
// activations, each with primitives made per m or taking m at run time) whatever m is, on pools of
// 1, 2 and 3 threads. The reference multiplies the exact fp32 value of every bf16/f16 weight, so
// the bound measures accumulation error only; for the rounded paths with bf16 weights it
// multiplies bf16(x), the activations those paths are defined to use. A build without oneDNN
// (PAGODA_ONEDNN=OFF) has linear() and the streaming kernel only.
#include <gtest/gtest.h>

#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include "core/half.h"
#include "kernel_test_util.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_paths.h"

namespace pagoda::cpu {
namespace {

using testing::make_weights;
using testing::normalised_error;
using testing::random_floats;

// fp32 accumulation over k <= 8192 random terms stays well below this; a wrong element, a missed
// tail or bf16-rounded activations (error ~4e-3) would not.
constexpr double kTolerance = 1e-5;

struct LinearCase {
  int64_t m, k, n;
  DType dtype;
  bool bias;
};

using LinearFn = void (*)(const float*, int64_t, int64_t, const void*, DType, int64_t, const float*,
                          float*, ThreadPool&);

void linear_exact(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                  const float* bias, float* y, ThreadPool& pool) {
  linear(x, m, k, w, w_dtype, n, bias, y, pool);
}

#ifdef PAGODA_HAVE_ONEDNN
// The oneDNN path with its primitive made for each m (fixed) or taking m at run time, whatever the
// size of the product; exact through widened weights or three bf16 terms of x, or rounded x.
template <Bf16Matmul kBf16, Bf16Method kMethod, bool kFixedM>
void onednn(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
            const float* bias, float* y, ThreadPool& pool) {
  OnednnOptions options;
  options.bf16 = kBf16;
  options.method = kMethod;
  options.fixed_m_min_flops = kFixedM ? 0 : std::numeric_limits<int64_t>::max();
  linear_onednn(x, m, k, w, w_dtype, n, bias, y, pool, options);
}

constexpr auto kExact = Bf16Matmul::kExact;
constexpr auto kRound = Bf16Matmul::kRound;
constexpr LinearFn kRoundFixed = &onednn<kRound, Bf16Method::kAuto, true>;
constexpr LinearFn kRoundRuntime = &onednn<kRound, Bf16Method::kAuto, false>;

// linear() itself, then each of its paths on every shape, whatever m.
const std::pair<const char*, LinearFn> kPaths[] = {
    {"linear", &linear_exact},
    {"streaming", &linear_streaming},
    {"onednn-widen-fixed-m", &onednn<kExact, Bf16Method::kWiden, true>},
    {"onednn-widen-runtime-m", &onednn<kExact, Bf16Method::kWiden, false>},
    {"onednn-terms-fixed-m", &onednn<kExact, Bf16Method::kTerms, true>},
    {"onednn-terms-runtime-m", &onednn<kExact, Bf16Method::kTerms, false>},
    {"onednn-round-fixed-m", kRoundFixed},
    {"onednn-round-runtime-m", kRoundRuntime}};

// The paths that differ only for bf16 weights (f32 and f16 weights take the same route in each).
bool bf16_only(LinearFn fn) {
  return fn == kRoundFixed || fn == kRoundRuntime ||
         fn == &onednn<kExact, Bf16Method::kTerms, true> ||
         fn == &onednn<kExact, Bf16Method::kTerms, false>;
}

// The paths with bf16-rounded activations.
bool rounds_x(LinearFn fn) { return fn == kRoundFixed || fn == kRoundRuntime; }
constexpr int kBf16OnlyPaths = 4;
#else
const std::pair<const char*, LinearFn> kPaths[] = {{"linear", &linear_exact},
                                                   {"streaming", &linear_streaming}};
bool bf16_only(LinearFn) { return false; }
bool rounds_x(LinearFn) { return false; }
constexpr int kBf16OnlyPaths = 0;
#endif  // PAGODA_HAVE_ONEDNN

std::string describe(const LinearCase& c);

// Runs one case through every path (bf16-only ones for bf16 weights) on each pool and checks each
// result against the fp64 reference, computed once: with x as given, and with bf16(x) for the
// rounded paths. The y buffer carries a canary after the end. Returns the number of runs checked.
int check_case(const LinearCase& c, const std::vector<ThreadPool*>& pools, uint32_t seed) {
  const auto x = random_floats(static_cast<size_t>(c.m * c.k), seed);
  const auto w = make_weights(static_cast<size_t>(c.n * c.k), c.dtype, seed + 1);
  const auto bias = random_floats(static_cast<size_t>(c.n), seed + 2);
  auto reference = [&](bool round_x) {
    std::vector<double> ref(static_cast<size_t>(c.m * c.n));
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = c.bias ? bias[j] : 0.0;
        for (int64_t l = 0; l < c.k; ++l) {
          const float xv = x[i * c.k + l];
          acc += static_cast<double>(round_x ? bf16_to_float(float_to_bf16(xv)) : xv) *
                 w.values[j * c.k + l];
        }
        ref[i * c.n + j] = acc;
      }
    }
    return ref;
  };
  const auto exact = reference(false);
  std::vector<double> rounded;
  if (c.dtype == DType::kBF16) rounded = reference(true);
  int checked = 0;
  for (ThreadPool* pool : pools) {
    for (auto [name, fn] : kPaths) {
      if (c.dtype != DType::kBF16 && bf16_only(fn)) continue;
      std::vector<float> y(static_cast<size_t>(c.m * c.n) + 1, 12345.0f);
      fn(x.data(), c.m, c.k, w.bytes.data(), c.dtype, c.n, c.bias ? bias.data() : nullptr, y.data(),
         *pool);
      const std::string what =
          describe(c) + " " + name + " threads=" + std::to_string(pool->num_threads());
      EXPECT_EQ(y.back(), 12345.0f) << "wrote past the end of y: " << what;
      y.pop_back();
      const bool round_x = c.dtype == DType::kBF16 && rounds_x(fn);
      EXPECT_LE(normalised_error(y, round_x ? rounded : exact), kTolerance) << what;
      ++checked;
    }
  }
  return checked;
}

std::string describe(const LinearCase& c) {
  return "m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) + " n=" + std::to_string(c.n) +
         " dtype=" + std::string(dtype_name(c.dtype)) + (c.bias ? " bias" : "");
}

TEST(LinearTest, GridOfShapesDtypesAndBias) {
  const int64_t kRows[] = {1, 2, 3, 7, 16, 17, 33, 64, 200, 300};
  const int64_t kSizes[] = {1, 3, 31, 64, 172, 257};
  ThreadPool pool(2);
  int cases = 0;
  uint32_t seed = 1;  // each case's x, w and bias from seed, seed + 1, seed + 2
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t m : kRows) {
      for (int64_t k : kSizes) {
        for (int64_t n : kSizes) {
          for (bool bias : {false, true})
            cases += check_case({m, k, n, dtype, bias}, {&pool}, seed += 3);
        }
      }
    }
  }
  // Every path for bf16 weights, all but the bf16-only ones for f32 and f16.
  constexpr int kAll = static_cast<int>(std::size(kPaths));
  EXPECT_EQ(cases, (kAll + 2 * (kAll - kBf16OnlyPaths)) * 10 * 6 * 6 * 2);
}

TEST(LinearTest, LargeShapesOnOneTwoAndThreeThreads) {
  const std::vector<LinearCase> cases = {
      {1, 2048, 512, DType::kBF16, false},  {1, 8192, 96, DType::kBF16, true},
      {16, 2048, 300, DType::kBF16, false}, {5, 1000, 333, DType::kF16, true},
      {16, 2048, 130, DType::kF32, true},   {32, 2048, 256, DType::kBF16, true},
      {100, 515, 1030, DType::kF16, false}, {129, 2048, 200, DType::kF32, false},
      {512, 64, 17, DType::kBF16, true},    {300, 2048, 515, DType::kBF16, true},
      {77, 4097, 129, DType::kBF16, false}, {65, 333, 1000, DType::kF16, true},
      {160, 1024, 2050, DType::kF32, true}, {96, 2048, 1500, DType::kF16, false},
      {1100, 64, 100, DType::kBF16, true},  // more rows than one block of three bf16 terms
  };
  ThreadPool one(1), two(2), three(3);
  uint32_t seed = 1000;
  for (const auto& c : cases) check_case(c, {&one, &two, &three}, seed += 3);
}

}  // namespace
}  // namespace pagoda::cpu
