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

/// A 32-bit integer hash with full avalanche: Wellons' "lowbias32" from hash-prospector (two
/// multiply-xorshift rounds).
__device__ __forceinline__ uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/// Gumbel(0, 1) noise of token v: -log(-log(u)), u uniform in (0, 1) from 23 hash bits, in fp32.
/// The per-token hash is 32-bit (the draw key's halves folded in, one hash32 round each): a
/// 152k-token row pays it for every kept token, and two 64-bit mixes cost twice as much. 23 bits
/// keep u below 1 in fp32 (1 - 2^-24 is the largest float under 1); the noise then spans
/// [-2.8, 16.6], a truncation at probability 2^-23 on either side. The inner logarithm is the
/// accurate one (u near 1 needs its relative accuracy), the outer the fast one.
__device__ __forceinline__ float gumbel(uint64_t key, int64_t v) {
  const uint32_t h = hash32(hash32(static_cast<uint32_t>(v) ^ static_cast<uint32_t>(key)) ^
                            static_cast<uint32_t>(key >> 32));
  const float u = (static_cast<float>(h >> 9) + 0.5f) * (1.0f / 8388608.0f);
  return -__logf(-logf(u));
}

}  // namespace pagoda::cuda
