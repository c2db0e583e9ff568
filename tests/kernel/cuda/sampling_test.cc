// GPU sampling (sample_rows): greedy against a host argmax (ties included), and the Gumbel-max
// draw against softmax(logits / T) by chi-square, with seeds that reproduce per (seed, counter).
// To add a case: build logits on the host, run sample_rows, compare with the host definition.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cuda/sampling.h"

namespace pagoda::cuda {
namespace {

using testing::DeviceBuffer;
using testing::to_device;
using testing::to_host;

TEST(Sampling, GreedyIsTheFirstMaximumInEveryDtype) {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  for (const int64_t vocab : {int64_t{128256}, int64_t{512}}) {  // 512: the small models
    const int64_t rows = 37;
    const int64_t tie_a = vocab > 2000 ? 1000 : 100, tie_b = vocab > 2000 ? 90000 : 400;
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      std::vector<float> values(static_cast<size_t>(rows * vocab));
      std::uniform_real_distribution<float> u(-8.0f, 8.0f);
      for (auto& v : values) v = u(rng);
      for (int64_t r = 0; r < rows; ++r) {  // a planted tie at two places: the lower index wins
        values[static_cast<size_t>(r * vocab + tie_a + r)] = 30.0f;
        values[static_cast<size_t>(r * vocab + tie_b + r)] = 30.0f;
      }
      DeviceBuffer logits;
      if (dt == DType::kF32) {
        logits = to_device(values);
      } else {
        std::vector<uint16_t> bits(values.size());
        for (size_t i = 0; i < bits.size(); ++i) bits[i] = testing::float_to_half(values[i], dt);
        logits = to_device(bits);
      }
      const std::vector<RowSample> params(static_cast<size_t>(rows));  // temperature 0
      DeviceBuffer d_params = to_device(params);
      DeviceBuffer d_tokens(static_cast<size_t>(rows) * sizeof(int32_t));
      CUDA_OK(sample_rows(logits.get(), dt, rows, vocab, d_params.as<RowSample>(),
                          d_tokens.as<int32_t>(), nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      const auto tokens = to_host<int32_t>(d_tokens, static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r)
        EXPECT_EQ(tokens[static_cast<size_t>(r)], tie_a + r) << r << " vocab " << vocab;
    }
  }
}

TEST(Sampling, GumbelMaxSamplesTheSoftmaxByChiSquare) {
  REQUIRE_GPU();
  const std::vector<float> row = {2.0f, 1.5f, 1.2f, 0.3f, 0.0f, -0.5f, -1.0f, -3.0f};
  const int64_t vocab = static_cast<int64_t>(row.size()), draws = 40000;
  for (float temperature : {1.0f, 0.6f, 2.0f}) {
    std::vector<float> logits;
    std::vector<RowSample> params;
    for (int64_t d = 0; d < draws; ++d) {
      logits.insert(logits.end(), row.begin(), row.end());
      params.push_back({temperature, 0, 1234, static_cast<uint64_t>(d)});
    }
    DeviceBuffer d_logits = to_device(logits), d_params = to_device(params);
    DeviceBuffer d_tokens(static_cast<size_t>(draws) * sizeof(int32_t));
    CUDA_OK(sample_rows(d_logits.get(), DType::kF32, draws, vocab, d_params.as<RowSample>(),
                        d_tokens.as<int32_t>(), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const auto tokens = to_host<int32_t>(d_tokens, static_cast<size_t>(draws));
    std::vector<double> expected(row.size());
    double z = 0;
    for (size_t i = 0; i < row.size(); ++i) z += expected[i] = std::exp(row[i] / temperature);
    std::vector<int> counts(row.size(), 0);
    for (int32_t t : tokens) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, vocab);
      counts[static_cast<size_t>(t)]++;
    }
    double chi2 = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      const double e = expected[i] / z * static_cast<double>(draws);
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    EXPECT_LT(chi2, 24.32) << "T=" << temperature << " (chi-square, 7 df, p = 0.001)";
    // The same (seed, counter) draws the same token: a second launch gives identical draws.
    DeviceBuffer again(static_cast<size_t>(draws) * sizeof(int32_t));
    CUDA_OK(sample_rows(d_logits.get(), DType::kF32, draws, vocab, d_params.as<RowSample>(),
                        again.as<int32_t>(), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(to_host<int32_t>(again, static_cast<size_t>(draws)), tokens);
    EXPECT_GT(counts[1], 0);
  }
}

}  // namespace
}  // namespace pagoda::cuda
