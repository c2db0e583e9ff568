#pragma once
// The counter-based Gumbel noise of the GPU samplers: a hash of (seed, counter, token), so that a
// request's draws depend on its seed and token index alone, not on the batch it runs in.
#include <cstdint>

namespace pagoda::cuda {

__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The per-draw key of (seed, counter).
__device__ __forceinline__ uint64_t draw_key(uint64_t seed, uint64_t counter) {
  return mix(seed ^ mix(counter + 0x632be59bd9b4e019ull));
}

/// Gumbel(0, 1) noise of token v: -log(-log(u)), u uniform in (0, 1) from 23 hash bits, in fp32.
/// 23 bits keep u below 1 in fp32 (1 - 2^-24 is the largest float under 1); the noise then spans
/// [-2.8, 16.6], a truncation at probability 2^-23 on either side. fp32 logarithms instead of
/// fp64 make a 152k-token row ~5x cheaper (fp64 runs at 1/2 rate and log is a long routine).
__device__ __forceinline__ float gumbel(uint64_t key, int64_t v) {
  const uint64_t h = mix(key ^ mix(static_cast<uint64_t>(v)));
  const float u = (static_cast<float>(h >> 41) + 0.5f) * (1.0f / 8388608.0f);
  return -__logf(-logf(u));
}

}  // namespace pagoda::cuda
