#pragma once
// --load-format dummy: random weights of the right shapes for any config.json, for benchmarks.
#include <functional>
#include <vector>

#include "core/thread_pool.h"
#include "model/definition.h"
#include "model/loader/safetensors.h"

namespace pagoda {

/// How tensor `index` of a spec list is drawn: element i is offset + scale * u, with u uniform in
/// [-1, 1) from splitmix64(seed + i) (the GPU backend draws the same values on the device).
struct DummyInit {
  uint64_t seed;
  float offset;
  float scale;
};
[[nodiscard]] DummyInit dummy_init(const TensorSpec& spec, size_t index, uint64_t seed);

/// Fills a WeightStore with deterministic pseudo-random tensors (a counter-based hash of seed,
/// tensor index and element index, so the values do not depend on the thread count). Matrices are
/// uniform in +-0.035 (std 0.02, the usual initializer_range); norm weights are uniform in
/// [0.9, 1.1]. `progress` (may be empty) gets the fraction of tensors done.
[[nodiscard]] WeightStore make_dummy_weights(const std::vector<TensorSpec>& specs, DType dtype,
                                             uint64_t seed, ThreadPool& pool,
                                             const std::function<void(double)>& progress = {});

}  // namespace pagoda
