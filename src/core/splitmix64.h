#pragma once
// SplitMix64 (Steele, Lea and Flood 2014): a 64-bit mix whose outputs over consecutive inputs pass
// BigCrush; pagoda hashes (seed, index) pairs with it where a stateless random stream is needed
// (dummy weights, draft-model draws). Example: splitmix64(0) = 0xe220a8397b1dcdaf.
#include <cstdint>

namespace pagoda {

[[nodiscard]] constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace pagoda
