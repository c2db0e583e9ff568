// A quantized KV cache on the GPU (label gpu, the device machine): stories260K and the tiny
// checkpoints with --kv-cache-dtype fp8 (e4m3) and fp8_e5m2, scale 1.0 (these checkpoints carry no
// k/v scales), teacher-forced along transformers' greedy tokens through prefill and one decode step
// per token (golden::teacher_forced_error), at block sizes 16 and 5 so that both attention kernels
// and rope_and_cache's encoder run. The bound is the CPU's for the same cache
// (kv_cache_dtype_golden_test.cc: 1.5x its measured error against transformers) plus the GPU's bf16
// golden bound (0.5, golden_gpu_test.cc): the GPU rounds activations to bf16 before encoding, so
// some codes differ by one step from the CPU's. int8 has its exact kernel tests
// (kernels_cuda_test); with scale 1.0 it would round K and V to whole numbers, and the GPU does not
// calculate scales yet.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/mapped_file.h"
#include "core/status.h"
#include "golden_check.h"
#include "runtime/device_model.h"

namespace pagoda {
namespace {

struct Variant {
  const char* dtype;
  double stories_bound, tiny_bound;
};
constexpr double kGpuSlack = 0.5;
constexpr Variant kVariants[] = {{"fp8", 2.9 + kGpuSlack, 4.0 + kGpuSlack},
                                 {"fp8_e5m2", 5.5 + kGpuSlack, 5.7 + kGpuSlack}};

std::unique_ptr<Model> load_gpu(const std::string& dir, const std::string& kv_dtype,
                                ThreadPool& pool, bool calculate = false) {
  LoadOptions options = golden::fixture_load_options(dir);
  options.kv_cache = KVCacheOptions{kv_dtype, calculate};
  return load_model_on_device(dir, options, "cuda", pool);
}

TEST(KVCacheDTypeGpu, QuantizedCacheStaysCloseToTransformers) {
  ASSERT_TRUE(cuda_available()) << "no CUDA GPU: run this test on the device machine (label gpu)";
  ThreadPool pool(2);
  std::vector<std::string> dirs = {golden::kSource + "/models/stories260K"};
  for (const char* name : golden::kTinyFixtures)
    dirs.push_back(golden::kSource + "/tests/data/tiny/" + name);
  for (const Variant& v : kVariants) {
    double stories_err = 0, tiny_err = 0;
    for (const std::string& dir : dirs) {
      const bool stories = dir.find("stories260K") != std::string::npos;
      const nlohmann::json golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
      auto dense = load_gpu(dir, "auto", pool);
      auto model = load_gpu(dir, v.dtype, pool);
      // One byte per element instead of the activation dtype's two.
      EXPECT_EQ(dense->kv_cache_spec().bytes_per_token(),
                2 * model->kv_cache_spec().bytes_per_token());
      for (int block_size : {16, 5}) {
        SCOPED_TRACE(dir + " --kv-cache-dtype " + v.dtype + " block size " +
                     std::to_string(block_size));
        double err = 0;
        for (const nlohmann::json& c : golden.at("cases"))
          err = std::max(err, golden::teacher_forced_error(*model, c, block_size));
        EXPECT_LE(err, stories ? v.stories_bound : v.tiny_bound);
        double& worst = stories ? stories_err : tiny_err;
        worst = std::max(worst, err);
      }
    }
    std::printf(
        "GPU --kv-cache-dtype %s: max |dlogprob| vs transformers stories260K %.3f, tiny %.3f\n",
        v.dtype, stories_err, tiny_err);
  }
}

TEST(KVCacheDTypeGpu, RefusesWhatTheGpuDoesNotRun) {
  ASSERT_TRUE(cuda_available()) << "no CUDA GPU: run this test on the device machine (label gpu)";
  ThreadPool pool(2);
  const std::string dir = golden::kSource + "/models/stories260K";
  auto message = [&](const std::string& dtype, bool calculate) -> std::string {
    try {
      load_gpu(dir, dtype, pool, calculate);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message("fp8", true).find("--calculate-kv-scales"), std::string::npos);
  EXPECT_NE(message("float16", false).find("--kv-cache-dtype float16"), std::string::npos);
  EXPECT_NE(message("fp4", false).find("--kv-cache-dtype"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
