#pragma once
// Tensor parallelism, Megatron style: what one rank of a group of `world` ranks holds.
//
// How it works. Each rank takes a slice of every projection from the ordinary checkpoint:
//  - column-parallel qkv and gate_up: a slice of each output segment. Rank r of N holds query
//    heads [r H/N, (r+1) H/N), KV heads [r K/N, (r+1) K/N) when N divides K, else (K divides N:
//    KV heads replicated) the one KV head r K / N its query heads read; gate and up rows
//    [r I/N, (r+1) I/N);
//  - row-parallel o and down: the matching input columns (o: its query heads' features; down:
//    its intermediate features); each rank's product is a partial sum, and one all-reduce after
//    o and one after down make the full sublayer output on every rank before the residual add
//    (a row-parallel bias stays on rank 0, zeros elsewhere);
//  - vocabulary-parallel embedding and LM head: rows [first, first + rows) of vocab_shard(); the
//    embedding of a token outside the slice is zero, summed by an all-reduce; the LM head's logits
//    [tokens, rows] are all-gathered into [tokens, vocab];
//  - norms (and Qwen3's per-head q/k norms) replicated.
// A row slice of a [rows, in] tensor is a view of the mapped checkpoint (its pages are the only
// ones read); a column slice, or rows of several segments of a fused tensor (Phi-3's qkv_proj),
// becomes an owned copy of the rank's elements.
#include <cstdint>

#include "core/communicator.h"
#include "model/definition.h"
#include "model/loader/safetensors.h"

namespace pagoda {

/// A rank's place in its tensor-parallel group (world 1: the whole model, no communicator).
struct TensorParallel {
  int rank = 0;
  int world = 1;
  Communicator* comm = nullptr;  // not owned; null when world is 1
  /// --decode-context-parallel-size: groups of `dcp` ranks spread each sequence's KV over their
  /// members by position (model/context_parallel.h); 1: off. Divides world.
  int dcp = 1;
};

/// The vocabulary rows of one rank: ceil(vocab / world) per rank (`stride`, the gathered logits'
/// row pitch), the last ranks fewer. Example: vocab 32001 over 4 ranks: stride 8001, rank 3 holds
/// rows [24003, 32001), 7998 of them.
struct VocabShard {
  int64_t first = 0;
  int64_t rows = 0;
  int64_t stride = 0;
};
[[nodiscard]] VocabShard vocab_shard(int64_t vocab, int rank, int world);

/// InvalidArgument naming the config field and --tensor-parallel-size when `d` cannot be split
/// over `world` ranks: heads, KV heads (N % K or K % N), intermediate size, vocabulary smaller
/// than the group, or a quantized projection.
void check_tensor_parallel(const ModelDefinition& d, int world);

/// Rank `rank`'s definition: its heads, KV heads and intermediate features, its vocabulary rows as
/// lm_head's one segment (vocab_size stays the model's).
[[nodiscard]] ModelDefinition shard_definition(const ModelDefinition& d, int rank, int world);

/// Replaces every sharded tensor of `weights` (named by the whole model's definition `d`) by rank
/// `rank`'s slice, in the shapes of shard_definition(d, rank, world).
void shard_weights(WeightStore& weights, const ModelDefinition& d, int rank, int world);

}  // namespace pagoda
