#pragma once
// Division by a divisor fixed at launch (the KV cache's block size) in two instructions: a
// multiply-high and a shift (Granlund and Montgomery, "Division by invariant integers using
// multiplication", 1994, figure 4.1). The compiler's division by a runtime int is ~25 dependent
// instructions; the attention kernels divide every key position by the block size. Host-usable,
// so the magic numbers are made where the launch is prepared and the arithmetic is tested on CPU.
#include <cstdint>

#if defined(__CUDACC__)
#define PAGODA_HOST_DEVICE __host__ __device__
#else
#define PAGODA_HOST_DEVICE
#endif

namespace pagoda::cuda {

struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;  // floor(2^32 (2^shift - divisor) / divisor) + 1
  uint32_t shift = 0;       // ceil(log2(divisor))

  FastDivmod() = default;
  /// divisor >= 1.
  explicit FastDivmod(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;
    multiplier =
        static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }

  /// n / divisor for 0 <= n < 2^31 (the sum below then stays within 32 bits).
  PAGODA_HOST_DEVICE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, multiplier);
#else
    const auto hi = static_cast<uint32_t>((uint64_t{n} * multiplier) >> 32);
#endif
    return (hi + n) >> shift;
  }
  /// Quotient and remainder of n / divisor, 0 <= n < 2^31.
  PAGODA_HOST_DEVICE void divmod(uint32_t n, uint32_t* quotient, uint32_t* remainder) const {
    *quotient = div(n);
    *remainder = n - *quotient * divisor;
  }
};

}  // namespace pagoda::cuda
