// Which projection formats the GPU loads (runtime/cuda/cuda_weights.h, cuda_supports): host-side
// arithmetic over model definitions, no GPU needed. The real-layout fixtures of
// tests/data/tiny-quant as the GPU golden test expects them (loaded or refused by name), and the
// INT8 W8A8 schemes one at a time.
#include <gtest/gtest.h>

#include <string>

#include "model/config.h"
#include "model/registry.h"
#include "runtime/cuda/cuda_weights.h"

namespace pagoda {
namespace {

const std::string kQuant = std::string(PAGODA_SOURCE_DIR) + "/tests/data/tiny-quant/";

ModelDefinition fixture_definition(const std::string& name) {
  return define_model(load_model_config(kQuant + name));
}

/// Whether every projection of every layer runs on the GPU.
bool all_supported(const ModelDefinition& d) {
  bool ok = true;
  for (const LayerDef& l : d.layers)
    for (const LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) ok = ok && cuda_supports(*lin);
  return ok;
}

TEST(CudaSupports, RealLayoutFixtures) {
  const std::pair<const char*, bool> cases[] = {
      {"ct-fp8-dynamic", true},  {"ct-fp8-static-kv", true},    {"ct-int8-dynamic", true},
      {"gptq-g128-sym", true},   {"gptq-8bit-sidefile", false}, {"awq-g64", true},
      {"modelopt-nvfp4", false},
  };
  for (const auto& [name, want] : cases)
    EXPECT_EQ(all_supported(fixture_definition(name)), want) << name;
}

TEST(CudaSupports, Int8Schemes) {
  const ModelDefinition d = fixture_definition("ct-int8-dynamic");
  LinearDef lin = d.layers[0].qkv;
  ASSERT_EQ(lin.format, WeightFormat::kInt8);
  EXPECT_EQ(lin.quant.weight_scales, ScaleStrategy::kChannel);
  EXPECT_EQ(lin.quant.activations, ActivationQuant::kDynamicToken);
  EXPECT_TRUE(cuda_supports(lin));
  lin.quant.activations = ActivationQuant::kStaticTensor;
  EXPECT_TRUE(cuda_supports(lin));
  lin.quant.weight_scales = ScaleStrategy::kTensor;
  EXPECT_TRUE(cuda_supports(lin));
  // The dp4a GEMV and the IMMA GEMM multiply int8 by int8: no weight-only INT8.
  lin.quant.activations = ActivationQuant::kNone;
  EXPECT_FALSE(cuda_supports(lin));
  lin.quant.activations = ActivationQuant::kDynamicGroup;
  EXPECT_FALSE(cuda_supports(lin));
  lin.quant.activations = ActivationQuant::kDynamicToken;
  lin.quant.weight_scales = ScaleStrategy::kBlock;
  EXPECT_FALSE(cuda_supports(lin));
  // FP8 keeps its weight-only scheme (W8A16).
  LinearDef fp8 = fixture_definition("ct-fp8-dynamic").layers[0].qkv;
  fp8.quant.activations = ActivationQuant::kNone;
  EXPECT_TRUE(cuda_supports(fp8));
}

}  // namespace
}  // namespace pagoda
