#include "runtime/weight_chunk_plan.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda {

int64_t WeightChunk::bytes() const {
  int64_t total = 0;
  for (const ChunkPiece& p : pieces) total += p.bytes;
  return total;
}

std::vector<WeightChunk> plan_weight_chunks(std::span<const StreamItem> items, int64_t buffer_bytes,
                                            int num_buffers) {
  PAGODA_CHECK(buffer_bytes > 0 && buffer_bytes % kChunkPieceAlign == 0,
               "staging buffer size {} is not a positive multiple of {}", buffer_bytes,
               kChunkPieceAlign);
  PAGODA_CHECK(num_buffers > 0, "need at least one staging buffer, got {}", num_buffers);
  std::vector<WeightChunk> chunks;
  int64_t used = buffer_bytes;  // of the last chunk; "full" so that the first piece opens one
  auto open_chunk = [&] {
    chunks.push_back(
        WeightChunk{static_cast<int>(chunks.size() % static_cast<size_t>(num_buffers)), {}});
    used = 0;
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const StreamItem& item = items[i];
    PAGODA_CHECK(
        item.bytes >= 0 && item.element_bytes > 0 && kChunkPieceAlign % item.element_bytes == 0 &&
            item.bytes % item.element_bytes == 0,
        "weight {} of {} bytes has elements of {} bytes", i, item.bytes, item.element_bytes);
    int64_t offset = 0;
    while (offset < item.bytes) {
      if (used >= buffer_bytes) open_chunk();
      // The free space is a multiple of the alignment, hence of the element size.
      const int64_t bytes = std::min(item.bytes - offset, buffer_bytes - used);
      chunks.back().pieces.push_back(ChunkPiece{i, offset, used, bytes});
      offset += bytes;
      used += (bytes + kChunkPieceAlign - 1) / kChunkPieceAlign * kChunkPieceAlign;
    }
  }
  return chunks;
}

}  // namespace pagoda
