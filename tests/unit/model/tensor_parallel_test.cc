// A tensor-parallel rank's slices (model/tensor_parallel.h): the ranks' slices put back together
// are the whole tensors, KV heads are replicated when fewer than the ranks, and shapes that do not
// divide are refused by name.
#include "model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/dummy_weights.h"
#include "model/registry.h"

namespace pagoda {
namespace {

const std::string kSource = PAGODA_SOURCE_DIR;

struct Sharded {
  ModelDefinition def;
  WeightStore weights;
};

/// Rank `rank`'s definition and slices of `dir`'s shapes over dummy f32 weights (fixed seed).
Sharded shard(const ModelDefinition& full, int rank, int world) {
  ThreadPool pool(1);
  WeightStore w = make_dummy_weights(full.tensors(), DType::kF32, 7, pool);
  shard_weights(w, full, rank, world);
  return {shard_definition(full, rank, world), std::move(w)};
}

ModelDefinition definition_of(const std::string& dir) {
  return define_model(load_model_config(kSource + dir), {});
}

/// Row r of a [rows, cols] f32 tensor.
std::vector<float> row(const Tensor& t, int64_t r) {
  const int64_t cols = t.shape[1];
  return {t.as<float>() + r * cols, t.as<float>() + (r + 1) * cols};
}

TEST(TensorParallelShard, VocabRowsCoverTheVocabulary) {
  const VocabShard last = vocab_shard(32001, 3, 4);
  EXPECT_EQ(last.first, 24003);
  EXPECT_EQ(last.rows, 7998);
  EXPECT_EQ(last.stride, 8001);
  EXPECT_EQ(vocab_shard(512, 1, 2).first, 256);
  EXPECT_EQ(vocab_shard(512, 1, 2).rows, 256);
}

TEST(TensorParallelShard, SlicesPutBackTogetherAreTheWholeModel) {
  // stories260K: 8 heads, 4 KV heads, head_dim 8, intermediate 172, tied embeddings.
  const ModelDefinition full = definition_of("/models/stories260K");
  ThreadPool pool(1);
  const WeightStore whole = make_dummy_weights(full.tensors(), DType::kF32, 7, pool);
  const int world = 4;
  const LayerDef& l = full.layers[0];
  const int64_t q = l.attention.q_size(), kv = l.attention.kv_size(), h = full.hidden_size;
  const std::string qkv = l.qkv.sources[0].prefix + ".weight";  // q_proj
  const std::string k = l.qkv.sources[1].prefix + ".weight";
  const std::string o = l.o.sources[0].prefix + ".weight";
  for (int r = 0; r < world; ++r) {
    const Sharded s = shard(full, r, world);
    EXPECT_EQ(s.def.layers[0].attention.num_heads, 2);
    EXPECT_EQ(s.def.layers[0].attention.num_kv_heads, 1);
    EXPECT_EQ(s.def.layers[0].gate_up.out_segments[0], 43);
    // q rows [16 r, 16 r + 16) and k rows [8 r, 8 r + 8) of the whole tensors.
    const Tensor& qs = s.weights.get(qkv);
    ASSERT_EQ(qs.shape, (Shape{q / world, h}));
    for (int64_t i = 0; i < q / world; ++i)
      EXPECT_EQ(row(qs, i), row(whole.get(qkv), r * q / world + i)) << "rank " << r << " q " << i;
    const Tensor& ks = s.weights.get(k);
    ASSERT_EQ(ks.shape, (Shape{kv / world, h}));
    EXPECT_EQ(row(ks, 0), row(whole.get(k), r * kv / world));
    // o's columns [16 r, 16 r + 16).
    const Tensor& os = s.weights.get(o);
    ASSERT_EQ(os.shape, (Shape{h, q / world}));
    for (int64_t i = 0; i < h; ++i) {
      const std::vector<float> want = row(whole.get(o), i);
      EXPECT_EQ(row(os, i), std::vector<float>(want.begin() + r * q / world,
                                               want.begin() + (r + 1) * q / world));
    }
    // Embedding rows [128 r, 128 r + 128).
    EXPECT_EQ(row(s.weights.get(full.embed_name), 5), row(whole.get(full.embed_name), 128 * r + 5));
    EXPECT_EQ(s.def.lm_head.out_segments, (std::vector<int64_t>{128}));
  }
}

TEST(TensorParallelShard, FusedQkvWithFewerKvHeadsThanRanksReplicatesThem) {
  // phi3-hd64: one qkv_proj [q + 2 kv, hidden], 2 heads, 1 KV head of 64: over 2 ranks each holds
  // its query head and the one KV head.
  const ModelDefinition full = definition_of("/tests/data/tiny/phi3-hd64");
  ThreadPool pool(1);
  const WeightStore whole = make_dummy_weights(full.tensors(), DType::kF32, 7, pool);
  const std::string qkv = full.layers[0].qkv.sources.at(0).prefix + ".weight";
  ASSERT_EQ(full.layers[0].qkv.sources.size(), 1u);
  for (int r = 0; r < 2; ++r) {
    const Sharded s = shard(full, r, 2);
    EXPECT_EQ(s.def.layers[0].attention.num_kv_heads, 1);
    const Tensor& t = s.weights.get(qkv);
    ASSERT_EQ(t.shape[0], 64 * 3);
    EXPECT_EQ(row(t, 0), row(whole.get(qkv), 64 * r));           // its query head
    EXPECT_EQ(row(t, 64), row(whole.get(qkv), 128));             // k: the one KV head
    EXPECT_EQ(row(t, 128 + 63), row(whole.get(qkv), 192 + 63));  // v's last row
  }
}

TEST(TensorParallelShard, RefusesShapesThatDoNotDivide) {
  const ModelDefinition full = definition_of("/models/stories260K");
  auto message = [&](int world) {
    try {
      check_tensor_parallel(full, world);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message(2), "");
  EXPECT_EQ(message(4), "");
  EXPECT_NE(message(3).find("--tensor-parallel-size 3: num_attention_heads 8 is not divisible"),
            std::string::npos);
  EXPECT_NE(message(8).find("intermediate_size 172 is not divisible"), std::string::npos)
      << message(8);
}

}  // namespace
}  // namespace pagoda
