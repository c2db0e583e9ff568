// The step contract on the GPU: 1 + k tokens of a sequence in one step give the logits rows and
// hidden states of k + 1 single steps, within bf16 tolerance (the two runs take different kernel
// paths: the multi-token step may run the prefill attention and cuBLASLt, single steps the decode
// attention and the GEMVs). Label gpu: the device machine runs it.
#include <gtest/gtest.h>

#include <cmath>

#include "model_runner_test_util.h"
#include "runtime/device_model.h"

namespace pagoda {
namespace {

TEST(ModelRunnerGpu, MultiTokenStepsMatchSingleSteps) {
  ASSERT_TRUE(cuda_available()) << "no CUDA GPU: run this test on the device machine (label gpu)";
  ThreadPool pool(2);
  for (const runner_test::Case& c : runner_test::kCases) {
    SCOPED_TRACE(c.name);
    auto model = load_model_on_device(runner_test::model_dir(c), LoadOptions{}, "cuda", pool);
    const runner_test::Outputs whole = runner_test::run(*model, c, false);
    const runner_test::Outputs split = runner_test::run(*model, c, true);
    ASSERT_EQ(whole.logits.size(), split.logits.size());
    ASSERT_EQ(whole.hidden.size(), split.hidden.size());
    // bf16 activations: rows agree to the rounding of a few bf16 ulps of their scale.
    double max_logit = 0, max_diff = 0;
    for (size_t i = 0; i < whole.logits.size(); ++i) {
      max_logit = std::max(max_logit, static_cast<double>(std::fabs(whole.logits[i])));
      max_diff =
          std::max(max_diff, static_cast<double>(std::fabs(whole.logits[i] - split.logits[i])));
    }
    EXPECT_LT(max_diff, 0.05 * std::max(1.0, max_logit)) << "max logit " << max_logit;
    double max_h = 0, max_hd = 0;
    for (size_t i = 0; i < whole.hidden.size(); ++i) {
      max_h = std::max(max_h, static_cast<double>(std::fabs(whole.hidden[i])));
      max_hd = std::max(max_hd, static_cast<double>(std::fabs(whole.hidden[i] - split.hidden[i])));
    }
    EXPECT_LT(max_hd, 0.05 * std::max(1.0, max_h)) << "max hidden " << max_h;
  }
}

}  // namespace
}  // namespace pagoda
