#include "model/dummy_weights.h"

#include "core/half.h"

namespace pagoda {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Uniform in [-1, 1) from a 64-bit hash.
float unit(uint64_t h) {
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

}  // namespace

DummyInit dummy_init(const TensorSpec& spec, size_t index, uint64_t seed) {
  const bool is_norm = spec.shape.rank() == 1 && spec.name.find("norm") != std::string::npos;
  return DummyInit{splitmix64(seed ^ splitmix64(index + 1)), is_norm ? 1.0f : 0.0f,
                   is_norm ? 0.1f : 0.0346f};
}

WeightStore make_dummy_weights(const std::vector<TensorSpec>& specs, DType dtype, uint64_t seed,
                               ThreadPool& pool, const std::function<void(double)>& progress) {
  PAGODA_CHECK(is_float_weight_dtype(dtype), "dummy weights need a float dtype, got {}",
               dtype_name(dtype));
  WeightStore store = make_empty_weight_store("dummy weights");
  for (size_t index = 0; index < specs.size(); ++index) {
    const auto& spec = specs[index];
    const int64_t n = spec.shape.num_elements();
    Buffer buffer(static_cast<size_t>(n) * dtype_size(dtype));
    const DummyInit init = dummy_init(spec, index, seed);
    const float scale = init.scale, offset = init.offset;
    const uint64_t tensor_seed = init.seed;
    pool.parallel_for(n, 1 << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float v = offset + scale * unit(splitmix64(tensor_seed + static_cast<uint64_t>(i)));
        switch (dtype) {
          case DType::kF32:
            buffer.as<float>()[i] = v;
            break;
          case DType::kBF16:
            buffer.as<uint16_t>()[i] = float_to_bf16(v);
            break;
          default:
            buffer.as<uint16_t>()[i] = float_to_f16(v);
            break;
        }
      }
    });
    store.add_owned(spec.name, dtype, spec.shape, std::move(buffer));
    if (progress) progress(static_cast<double>(index + 1) / static_cast<double>(specs.size()));
  }
  return store;
}

}  // namespace pagoda
