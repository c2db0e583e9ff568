#include "model/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda {
namespace {

/// Rows [first, first + rows) of one output segment.
struct RowSlice {
  int64_t first = 0;
  int64_t rows = 0;
};

RowSlice even_slice(int64_t size, int rank, int world) {
  return {size / world * rank, size / world};
}

/// The rank's query-head and KV-head slices of a layer's qkv segments {q, k, v}, in rows.
/// Example: 8 heads, 2 KV heads, head_dim 4 over 4 ranks: rank 3 has q rows [24, 32) (heads 6,
/// 7) and KV head 3 * 2 / 4 = 1, rows [4, 8) of k and of v.
std::vector<RowSlice> qkv_slices(const AttentionDef& a, int rank, int world) {
  const RowSlice q{int64_t{a.num_heads} / world * rank * a.head_dim,
                   int64_t{a.num_heads} / world * a.head_dim};
  RowSlice kv;
  if (a.num_kv_heads % world == 0) {
    kv = {int64_t{a.num_kv_heads} / world * rank * a.head_dim,
          int64_t{a.num_kv_heads} / world * a.head_dim};
  } else {  // replicated: world / num_kv_heads ranks share each KV head
    kv = {int64_t{rank} * a.num_kv_heads / world * a.head_dim, a.head_dim};
  }
  return {q, kv, kv};
}

/// The rank's slices of each output segment of a column-parallel projection.
std::vector<RowSlice> out_slices(const LinearDef& l, const std::vector<RowSlice>& segments) {
  PAGODA_CHECK(segments.size() == l.out_segments.size(), "{}: {} slices for {} segments", l.name,
               segments.size(), l.out_segments.size());
  return segments;
}

/// Replaces `name` [R, C] (or [R]: C = 1) by the rows of `ranges` ({first, rows} pairs), in order:
/// one range is a view, several an owned copy.
void take_rows(WeightStore& w, const std::string& name, const std::vector<RowSlice>& ranges) {
  const Tensor t = w.get(name);
  const int64_t cols = t.shape.rank() > 1 ? t.shape[1] : 1;
  const size_t row_bytes = static_cast<size_t>(cols) * dtype_size(t.dtype);
  int64_t rows = 0;
  for (const RowSlice& r : ranges) {
    PAGODA_CHECK(r.first >= 0 && r.first + r.rows <= t.shape[0], "{}: rows [{}, {}) of {}", name,
                 r.first, r.first + r.rows, t.shape[0]);
    rows += r.rows;
  }
  const Shape shape = t.shape.rank() > 1 ? Shape{rows, cols} : Shape{rows};
  if (ranges.size() == 1) {
    w.replace_with_view(name, shape, static_cast<size_t>(ranges[0].first) * row_bytes);
    return;
  }
  Buffer b(static_cast<size_t>(rows) * row_bytes);
  auto* dst = static_cast<std::byte*>(b.data());
  for (const RowSlice& r : ranges) {
    std::memcpy(dst, static_cast<const std::byte*>(t.data) + r.first * row_bytes,
                static_cast<size_t>(r.rows) * row_bytes);
    dst += r.rows * row_bytes;
  }
  w.add_owned(name, t.dtype, shape, std::move(b));
}

/// Replaces `name` [R, C] by its columns [first, first + cols): an owned [R, cols] copy.
/// Example: columns [4, 8) of a [2, 8] tensor are elements 4..7 and 12..15.
void take_columns(WeightStore& w, const std::string& name, int64_t first, int64_t cols) {
  const Tensor t = w.get(name);
  PAGODA_CHECK(t.shape.rank() == 2 && first + cols <= t.shape[1], "{}: columns [{}, {})", name,
               first, first + cols);
  const size_t e = dtype_size(t.dtype);
  const int64_t rows = t.shape[0];
  Buffer b(static_cast<size_t>(rows * cols) * e);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(
        static_cast<std::byte*>(b.data()) + static_cast<size_t>(r * cols) * e,
        static_cast<const std::byte*>(t.data) + static_cast<size_t>(r * t.shape[1] + first) * e,
        static_cast<size_t>(cols) * e);
  }
  w.add_owned(name, t.dtype, Shape{rows, cols}, std::move(b));
}

/// Each source of a column-parallel projection: its weight's (and bias's) rows of the rank's
/// slices of the segments it covers. Example: Phi-3's qkv_proj covers q, k, v: rows of the q
/// slice, then of the k slice offset by q's rows, then of v offset by q + k.
void shard_columns_parallel(WeightStore& w, const LinearDef& l,
                            const std::vector<RowSlice>& slices) {
  for (const LinearDef::Source& s : l.sources) {
    std::vector<RowSlice> ranges;
    int64_t offset = 0;  // the segment's first row in this source
    for (int i = s.first_segment; i < s.first_segment + s.num_segments; ++i) {
      const RowSlice& slice = slices[static_cast<size_t>(i)];
      ranges.push_back({offset + slice.first, slice.rows});
      offset += l.out_segments[static_cast<size_t>(i)];
    }
    take_rows(w, s.prefix + ".weight", ranges);
    if (l.bias) take_rows(w, s.prefix + ".bias", ranges);
  }
}

/// A row-parallel projection: its input columns [first, first + cols); its bias on rank 0 only.
void shard_row_parallel(WeightStore& w, const LinearDef& l, int64_t first, int64_t cols, int rank) {
  for (const LinearDef::Source& s : l.sources) {
    take_columns(w, s.prefix + ".weight", first, cols);
    if (l.bias && rank != 0) {
      const Tensor bias = w.get(s.prefix + ".bias");
      Buffer zeros(bias.num_bytes());
      std::memset(zeros.data(), 0, zeros.size());
      w.add_owned(s.prefix + ".bias", bias.dtype, bias.shape, std::move(zeros));
    }
  }
}

}  // namespace

VocabShard vocab_shard(int64_t vocab, int rank, int world) {
  const int64_t stride = (vocab + world - 1) / world;
  const int64_t first = std::min(vocab, stride * rank);
  return {first, std::min(stride, vocab - first), stride};
}

void check_tensor_parallel(const ModelDefinition& d, int world) {
  if (world < 1) {
    throw InvalidArgument(fmt::format("--tensor-parallel-size {}: must be at least 1", world));
  }
  if (world == 1) return;
  auto refuse = [&](const std::string& what) {
    throw InvalidArgument(
        fmt::format("--tensor-parallel-size {}: {} ({})", world, what, d.architecture));
  };
  if (vocab_shard(d.vocab_size, world - 1, world).rows < 1) {
    refuse(fmt::format("vocab_size {} leaves the last rank no rows of ceil({} / {})", d.vocab_size,
                       d.vocab_size, world));
  }
  for (const LayerDef& l : d.layers) {
    const AttentionDef& a = l.attention;
    if (a.num_heads % world != 0) {
      refuse(fmt::format("num_attention_heads {} is not divisible by it", a.num_heads));
    }
    if (a.num_kv_heads % world != 0 && world % a.num_kv_heads != 0) {
      refuse(fmt::format(
          "num_key_value_heads {} neither divides it nor is divisible by it (KV heads are split, "
          "or replicated when fewer than the ranks)",
          a.num_kv_heads));
    }
    if (l.gate_up.out_segments.size() != 2 || l.gate_up.out_segments[0] % world != 0) {
      refuse(fmt::format("intermediate_size {} is not divisible by it", l.gate_up.out_segments[0]));
    }
    for (const LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      if (lin->format != WeightFormat::kDense) {
        refuse(fmt::format("{} is {}: only dense weights are sharded so far", lin->name,
                           weight_format_name(lin->format)));
      }
    }
  }
  if (!d.lm_head_tied && d.lm_head.format != WeightFormat::kDense) {
    refuse(fmt::format("lm_head is {}: only dense weights are sharded so far",
                       weight_format_name(d.lm_head.format)));
  }
}

ModelDefinition shard_definition(const ModelDefinition& d, int rank, int world) {
  ModelDefinition s = d;
  if (world == 1) return s;
  for (LayerDef& l : s.layers) {
    AttentionDef& a = l.attention;
    const std::vector<RowSlice> qkv = qkv_slices(a, rank, world);
    a.num_heads /= world;
    a.num_kv_heads = static_cast<int>(qkv[1].rows / a.head_dim);
    l.qkv.out_segments = {qkv[0].rows, qkv[1].rows, qkv[2].rows};
    l.o.in = qkv[0].rows;
    const int64_t inter = l.gate_up.out_segments[0] / world;
    l.gate_up.out_segments = {inter, inter};
    l.down.in = inter;
  }
  s.lm_head.out_segments = {vocab_shard(d.vocab_size, rank, world).rows};
  return s;
}

void shard_weights(WeightStore& weights, const ModelDefinition& d, int rank, int world) {
  if (world == 1) return;
  const VocabShard vocab = vocab_shard(d.vocab_size, rank, world);
  take_rows(weights, d.embed_name, {{vocab.first, vocab.rows}});
  const std::string head = d.lm_head.sources.at(0).prefix + ".weight";
  if (!d.lm_head_tied || weights.contains(head)) {
    shard_columns_parallel(weights, d.lm_head, out_slices(d.lm_head, {{vocab.first, vocab.rows}}));
  }
  for (const LayerDef& l : d.layers) {
    const std::vector<RowSlice> qkv = qkv_slices(l.attention, rank, world);
    shard_columns_parallel(weights, l.qkv, out_slices(l.qkv, qkv));
    shard_row_parallel(weights, l.o, qkv[0].first, qkv[0].rows, rank);
    const RowSlice inter = even_slice(l.gate_up.out_segments[0], rank, world);
    shard_columns_parallel(weights, l.gate_up, out_slices(l.gate_up, {inter, inter}));
    shard_row_parallel(weights, l.down, inter.first, inter.rows, rank);
  }
}

}  // namespace pagoda
