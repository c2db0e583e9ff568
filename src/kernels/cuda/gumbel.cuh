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

/// Gumbel(0, 1) noise of token v: -log(-log(u)), u uniform in (0, 1) from 53 hash bits.
__device__ __forceinline__ float gumbel(uint64_t key, int64_t v) {
  const uint64_t h = mix(key ^ mix(static_cast<uint64_t>(v)));
  const double u = (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  return static_cast<float>(-log(-log(u)));
}

}  // namespace pagoda::cuda
