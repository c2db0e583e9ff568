#pragma once
// The CUDA graphs of decode steps, one per (batch-size bucket, tokens per sequence): plain decodes
// compute one token per sequence, speculative verification 1 + k (docs/engine.md, "CUDA graphs
// and warm-up").
#include <cuda_runtime.h>

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace pagoda {

class DecodeGraphs {
 public:
  /// The step shape a graph is kept for: one executable graph per shape.
  struct Shape {
    int64_t seqs;        // the bucket of the sequence count
    int tokens_per_seq;  // 1 for decodes, 1 + k when verifying k drafts
    // ForwardBatch::hidden_layers: the copies of these layers' hidden states into the model's
    // fixed buffer are part of the graph (an EAGLE target's verification, a head's output).
    std::vector<int32_t> hidden_layers;
    int64_t input_width;  // an EAGLE head's input hidden width (fc or its own output), else 0
    auto operator<=>(const Shape&) const = default;
  };
  /// What a graph bakes into its kernels' parameters besides the buffers' addresses.
  struct Key {
    Shape shape;
    int table_width;
    int decode_grid;
    auto operator<=>(const Key&) const = default;
  };
  static constexpr int64_t kMaxTokens = 256;  // seqs * tokens_per_seq at most
  static constexpr int kMaxTokensPerSeq = 16;

  /// The bucket a decode batch of t sequences runs as: 1, 2, 4, 8, then multiples of 8 (vLLM's
  /// capture sizes).
  [[nodiscard]] static int64_t bucket(int64_t t);
  /// Every bucket up to the one of min(max_num_seqs, kMaxTokens) sequences, ascending.
  [[nodiscard]] static std::vector<int> buckets(int max_num_seqs);

  DecodeGraphs() = default;
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;
  ~DecodeGraphs() { clear(); }

  /// Launches the graph of key.shape on `stream`. When the shape has none yet, or one captured
  /// for another key, `record` (which must only enqueue work on `stream`) is
  /// captured first; a bucket's existing executable graph is updated in place (cudaGraphExecUpdate:
  /// only kernel parameters differ, a fraction of a fresh instantiate), else a new one
  /// instantiated. Throws Internal on a CUDA error.
  void launch(const Key& key, cudaStream_t stream, const std::function<void()>& record);
  /// Whether a graph was captured for the shape (its seqs a bucket).
  [[nodiscard]] bool captured(const Shape& shape) const { return graphs_.contains(shape); }
  /// Destroys every graph (after a buffer they bake in moved).
  void clear();

 private:
  struct BucketGraph {
    Key key{};
    cudaGraphExec_t exec = nullptr;
  };
  std::map<Shape, BucketGraph> graphs_;  // by Key::shape
};

}  // namespace pagoda
