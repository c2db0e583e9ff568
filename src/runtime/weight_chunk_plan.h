#pragma once
// The host-side plan of a streamed weight upload (runtime/cuda/weight_streamer.h): which bytes of
// which tensor go into which staging buffer, in which order. Pure arithmetic, so that it is tested
// without a GPU.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pagoda {

/// One tensor to stream: its size in the checkpoint and the size of one stored element.
struct StreamItem {
  int64_t bytes = 0;
  int64_t element_bytes = 1;
};

/// A run of one item's bytes, staged at `buffer_offset` in its chunk's buffer.
struct ChunkPiece {
  size_t item = 0;
  int64_t item_offset = 0;
  int64_t buffer_offset = 0;
  int64_t bytes = 0;
};

/// One fill of one staging buffer: the unit that a reader thread reads and the copy stream copies.
struct WeightChunk {
  int buffer = 0;  // chunk i uses buffer i % num_buffers
  std::vector<ChunkPiece> pieces;

  [[nodiscard]] int64_t bytes() const;
};

/// Pieces start at multiples of this in a buffer, so that the device conversion reads aligned
/// vectors; a split falls on such a multiple too.
inline constexpr int64_t kChunkPieceAlign = 256;

/// Packs the items, in order, into chunks of at most `buffer_bytes` (a positive multiple of
/// kChunkPieceAlign): small tensors share a chunk and a tensor larger than the free space is split
/// across consecutive chunks at element boundaries. Items of zero bytes get no piece. Buffers are
/// assigned round-robin, which is the order in which they free up.
[[nodiscard]] std::vector<WeightChunk> plan_weight_chunks(std::span<const StreamItem> items,
                                                          int64_t buffer_bytes, int num_buffers);

}  // namespace pagoda
