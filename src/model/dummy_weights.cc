#include "model/dummy_weights.h"

#include <algorithm>
#include <cmath>

#include "core/fp8.h"
#include "core/half.h"
#include "core/splitmix64.h"

namespace pagoda {
namespace {

/// Uniform in [-1, 1) from a 64-bit hash.
float unit(uint64_t h) {
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

/// A tensor whose dtype its format fixes (TensorSpec::dtype), drawn as spec.fill says.
Buffer quantized_dummy(const TensorSpec& spec, uint64_t tensor_seed, ThreadPool& pool) {
  const DType dtype = *spec.dtype;
  const int64_t n = spec.shape.num_elements();
  Buffer buffer(static_cast<size_t>(n) * dtype_size(dtype));
  const auto value_at = [&](int64_t i) -> double {
    switch (spec.fill) {
      case DummyFill::kUniform:
        return spec.fill_value * unit(splitmix64(tensor_seed + static_cast<uint64_t>(i)));
      case DummyFill::kConstant:
        return spec.fill_value;
      case DummyFill::kGroupIndex:
        return static_cast<double>(i / static_cast<int64_t>(spec.fill_value));
      case DummyFill::kRandomBits:
        break;
    }
    return 0;
  };
  pool.parallel_for(n, 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t bits = splitmix64(tensor_seed + static_cast<uint64_t>(i));
      const bool raw = spec.fill == DummyFill::kRandomBits;
      const double v = value_at(i);
      switch (dtype) {
        case DType::kF32:
          buffer.as<float>()[i] = static_cast<float>(v);
          break;
        case DType::kBF16:
          buffer.as<uint16_t>()[i] = float_to_bf16(static_cast<float>(v));
          break;
        case DType::kF16:
          buffer.as<uint16_t>()[i] = float_to_f16(static_cast<float>(v));
          break;
        case DType::kF8E4M3:
          buffer.as<uint8_t>()[i] = float_to_e4m3(static_cast<float>(v));
          break;
        case DType::kI8:
          buffer.as<int8_t>()[i] =
              raw ? static_cast<int8_t>(bits)
                  : static_cast<int8_t>(std::clamp(std::nearbyint(v), -127.0, 127.0));
          break;
        case DType::kU8:
          buffer.as<uint8_t>()[i] = raw ? static_cast<uint8_t>(bits) : static_cast<uint8_t>(v);
          break;
        case DType::kI32:
          buffer.as<int32_t>()[i] =
              raw ? static_cast<int32_t>(static_cast<uint32_t>(bits)) : static_cast<int32_t>(v);
          break;
        case DType::kI64:
          buffer.as<int64_t>()[i] = raw ? static_cast<int64_t>(bits) : static_cast<int64_t>(v);
          break;
        default:
          PAGODA_CHECK(false, "dummy weights cannot draw {} ({})", spec.name, dtype_name(dtype));
      }
    }
  });
  return buffer;
}

}  // namespace

DummyInit dummy_init(const TensorSpec& spec, size_t index, uint64_t seed) {
  const bool is_norm = spec.shape.rank() == 1 && spec.name.find("norm") != std::string::npos;
  return DummyInit{splitmix64(seed ^ splitmix64(index + 1)), is_norm ? 1.0f : 0.0f,
                   is_norm ? 0.1f : 0.0346f};
}

Buffer make_dummy_tensor(const TensorSpec& spec, size_t index, uint64_t seed, ThreadPool& pool) {
  PAGODA_CHECK(spec.dtype.has_value(), "make_dummy_tensor: {} has no fixed dtype", spec.name);
  return quantized_dummy(spec, dummy_init(spec, index, seed).seed, pool);
}

WeightStore make_dummy_weights(const std::vector<TensorSpec>& specs, DType dtype, uint64_t seed,
                               ThreadPool& pool, const std::function<void(double)>& progress) {
  PAGODA_CHECK(is_float_weight_dtype(dtype), "dummy weights need a float dtype, got {}",
               dtype_name(dtype));
  WeightStore store = make_empty_weight_store("dummy weights");
  for (size_t index = 0; index < specs.size(); ++index) {
    const auto& spec = specs[index];
    if (spec.dtype) {
      store.add_owned(spec.name, *spec.dtype, spec.shape,
                      make_dummy_tensor(spec, index, seed, pool));
      if (progress) progress(static_cast<double>(index + 1) / static_cast<double>(specs.size()));
      continue;
    }
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
