// The chunk plan of the pinned weight upload (runtime/weight_chunk_plan.h). Every plan is checked
// against the invariants that the GPU pipeline relies on (check_plan); to add a case, build a list
// of items and call check_plan, then state what is special about that plan.
#include "runtime/weight_chunk_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/status.h"

namespace pagoda {
namespace {

/// Every byte of every item appears exactly once, in order; pieces are aligned, in bounds and do
/// not overlap; splits fall on element boundaries; buffers go round-robin.
void check_plan(const std::vector<StreamItem>& items, const std::vector<WeightChunk>& chunks,
                int64_t buffer_bytes, int num_buffers) {
  size_t item = 0;
  int64_t item_offset = 0;
  auto skip_empty = [&] {
    while (item < items.size() && item_offset == items[item].bytes) {
      ++item;
      item_offset = 0;
    }
  };
  skip_empty();
  for (size_t c = 0; c < chunks.size(); ++c) {
    const WeightChunk& chunk = chunks[c];
    EXPECT_EQ(chunk.buffer, static_cast<int>(c % static_cast<size_t>(num_buffers)));
    ASSERT_FALSE(chunk.pieces.empty()) << "chunk " << c;
    int64_t end = 0;
    for (const ChunkPiece& p : chunk.pieces) {
      ASSERT_LT(item, items.size());
      EXPECT_EQ(p.item, item);
      EXPECT_EQ(p.item_offset, item_offset);
      EXPECT_GT(p.bytes, 0);
      EXPECT_EQ(p.buffer_offset % kChunkPieceAlign, 0);
      EXPECT_GE(p.buffer_offset, end);
      EXPECT_LE(p.buffer_offset + p.bytes, buffer_bytes);
      EXPECT_EQ(p.item_offset % items[item].element_bytes, 0);
      EXPECT_EQ(p.bytes % items[item].element_bytes, 0);
      end = p.buffer_offset + p.bytes;
      item_offset += p.bytes;
      skip_empty();
    }
  }
  EXPECT_EQ(item, items.size()) << "not every item was planned";
}

TEST(WeightChunkPlan, SmallTensorsShareOneBuffer) {
  const std::vector<StreamItem> items = {{8, 2}, {100, 4}, {512, 2}};
  const auto chunks = plan_weight_chunks(items, 4096, 4);
  check_plan(items, chunks, 4096, 4);
  ASSERT_EQ(chunks.size(), 1u);
  ASSERT_EQ(chunks[0].pieces.size(), 3u);
  EXPECT_EQ(chunks[0].pieces[1].buffer_offset, 256);
  EXPECT_EQ(chunks[0].pieces[2].buffer_offset, 512);
  EXPECT_EQ(chunks[0].bytes(), 620);
}

TEST(WeightChunkPlan, LargeTensorIsSplitAcrossBuffersRoundRobin) {
  const std::vector<StreamItem> items = {{10 * 1024 + 6, 2}};
  const auto chunks = plan_weight_chunks(items, 1024, 3);
  check_plan(items, chunks, 1024, 3);
  ASSERT_EQ(chunks.size(), 11u);
  EXPECT_EQ(chunks[3].buffer, 0);
  EXPECT_EQ(chunks[10].pieces[0].bytes, 6);
}

TEST(WeightChunkPlan, TensorStartingInAPartlyFilledBufferFillsItFirst) {
  const std::vector<StreamItem> items = {{300, 4}, {2048, 4}};
  const auto chunks = plan_weight_chunks(items, 1024, 2);
  check_plan(items, chunks, 1024, 2);
  ASSERT_EQ(chunks.size(), 3u);
  // The first tensor takes two aligned slots (512 bytes), the second the remaining 512.
  EXPECT_EQ(chunks[0].pieces[1].buffer_offset, 512);
  EXPECT_EQ(chunks[0].pieces[1].bytes, 512);
  EXPECT_EQ(chunks[1].pieces[0].bytes, 1024);
  EXPECT_EQ(chunks[2].pieces[0].bytes, 512);
}

TEST(WeightChunkPlan, EmptyItemsAndNoItems) {
  EXPECT_TRUE(plan_weight_chunks({}, 1024, 4).empty());
  const std::vector<StreamItem> items = {{0, 2}, {64, 2}, {0, 4}, {0, 2}, {32, 4}};
  const auto chunks = plan_weight_chunks(items, 1024, 4);
  check_plan(items, chunks, 1024, 4);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].pieces.size(), 2u);
}

TEST(WeightChunkPlan, ModelShapedMixOfDtypes) {
  // A small Llama-like layer list: f32 norms and bf16 matrices, buffers of 64 KiB.
  std::vector<StreamItem> items = {{256 * 4096 * 2, 2}};
  for (int l = 0; l < 3; ++l) {
    items.push_back({4096 * 4, 4});
    items.push_back({4096 * 4, 4});
    items.push_back({1536 * 512 * 2, 2});
    items.push_back({512 * 1536 * 2, 2});
    items.push_back({33 * 2, 2});
  }
  const int64_t buffer = 64 * 1024;
  const auto chunks = plan_weight_chunks(items, buffer, 5);
  check_plan(items, chunks, buffer, 5);
  int64_t planned = 0, total = 0;
  for (const auto& c : chunks) planned += c.bytes();
  for (const auto& i : items) total += i.bytes;
  EXPECT_EQ(planned, total);
}

TEST(WeightChunkPlan, RejectsBadSizes) {
  const std::vector<StreamItem> items = {{64, 2}};
  EXPECT_THROW((void)plan_weight_chunks(items, 1000, 4), Internal);
  EXPECT_THROW((void)plan_weight_chunks(items, 1024, 0), Internal);
  const std::vector<StreamItem> odd = {{6, 4}};
  EXPECT_THROW((void)plan_weight_chunks(odd, 1024, 4), Internal);
}

}  // namespace
}  // namespace pagoda
