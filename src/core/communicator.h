#pragma once
// Communicator: the collectives of a tensor-parallel group, one object per rank. The CPU group of
// processes on one machine is core/shm_communicator.h; the GPU group is NCCL's
// (kernels/cuda/nccl_communicator.h, built with PAGODA_CUDA). Every call is collective: all ranks
// of the group make the same calls, in the same order, with the same sizes
// (all_gather_range: each rank its own range).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace pagoda {

class Communicator {
 public:
  virtual ~Communicator() = default;

  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual int world_size() const = 0;

  /// data[i] = sum over ranks r of data_r[i], in place, for `count` elements of `dtype` (kF32 or
  /// kBF16). Every rank gets the same bits: the CPU group sums in rank order, ((d_0 + d_1) + d_2)
  /// + ..., in fp32, and rounds once to the dtype.
  virtual void all_reduce_sum(void* data, int64_t count, DType dtype) = 0;
  /// out = [world_size, bytes]: rank r's `in` (bytes each) at out + r * bytes. Example: 2 ranks
  /// with in = {a0, a1} and {b0, b1} (floats) give out = {a0, a1, b0, b1} on both.
  virtual void all_gather(const void* in, void* out, size_t bytes) = 0;
  /// all_gather restricted to what this rank reads: out = [count, bytes], ranks first ..
  /// first + count - 1 (each rank may name its own range, e.g. its -dcp group). Every rank calls
  /// it (the collective spans the world). Example: 4 ranks, ranks 0 and 1 name (0, 2), ranks 2 and
  /// 3 name (2, 2): ranks 2 and 3 get {c0, c1, d0, d1} from in = {c0, c1} and {d0, d1}. This
  /// default gathers everything and keeps the range; the CPU group reads only the range's slots.
  virtual void all_gather_range(const void* in, void* out, size_t bytes, int first, int count) {
    std::vector<std::byte> all(bytes * static_cast<size_t>(world_size()));
    all_gather(in, all.data(), bytes);
    std::memcpy(out, all.data() + static_cast<size_t>(first) * bytes,
                bytes * static_cast<size_t>(count));
  }
  /// root's `bytes` at data copied to every rank's data.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  /// Returns once every rank has called it.
  virtual void barrier() = 0;
  /// This rank cannot go on (a failed step): every rank's current and later collectives throw
  /// with `why`, instead of waiting for this rank forever.
  virtual void abort(const std::string& why) = 0;
};

}  // namespace pagoda
