#pragma once
// ModelRunner: turns one scheduled step (which tokens of which requests, and where their KV
// blocks are) into the flat varlen ForwardBatch, runs the model and hands back the logits rows
// that sampling and prompt log-probabilities need.
#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/model.h"

namespace pagoda {

/// One request's slice of a step: compute token_ids[num_computed, num_computed + num_new).
struct SequenceStep {
  std::span<const int32_t> token_ids;        // all of the request's tokens (drafts included)
  int num_computed = 0;                      // tokens already in its KV blocks
  int num_new = 0;                           // tokens to compute now
  std::span<const kv::BlockId> block_table;  // logical -> physical blocks, covering the new tokens
  bool sample = false;                       // wants the logits of its last new token
  bool prompt_logits = false;                // wants the logits of every new token
  DeviceDraw draw;                           // with sample: may be drawn on the model's device
};

/// Logits of one step: rows [num_rows, vocab] and, per SequenceStep, where its rows are.
struct StepLogits {
  std::span<float> rows;  // the model's logits buffer: valid until the next step
  int64_t vocab = 0;
  std::vector<int> sample_row;  // per sequence: the row to sample from, or -1
  std::vector<int>
      first_token_row;  // per sequence with prompt_logits: row of its first new token, else -1
  std::vector<int32_t> tokens;  // per row: the token drawn on the device, or -1 (use its logits)
  std::vector<DrawnLogprobs> logprobs;  // per row drawn on the device with num_logprobs >= 0

  [[nodiscard]] std::span<float> row(int r) {
    return {rows.data() + static_cast<size_t>(r) * static_cast<size_t>(vocab),
            static_cast<size_t>(vocab)};
  }
};

/// Runs steps of one model whose KV cache is initialised. Not thread-safe: the engine thread owns
/// it.
class ModelRunner {
 public:
  ModelRunner(Model& model, int block_size);

  /// Performs the copy-on-write block copies, then the forward pass of `steps` as one flat batch.
  [[nodiscard]] StepLogits execute(std::span<const SequenceStep> steps,
                                   std::span<const kv::BlockCopy> copies) {
    launch(steps, copies);
    return wait();
  }

  /// execute() in two halves: launch() builds the batch and starts the device on it (the steps'
  /// spans are copied; they may change afterwards), wait() blocks until its results are ready.
  /// The engine emits the previous step's tokens in between, while the device computes.
  void launch(std::span<const SequenceStep> steps, std::span<const kv::BlockCopy> copies);
  [[nodiscard]] StepLogits wait();
  [[nodiscard]] bool in_flight() const { return in_flight_; }

 private:
  Model& model_;
  int block_size_;
  bool in_flight_ = false;
  bool synchronous_ = false;  // the model computes in wait() (Model::start_step returned false)
  StepLogits pending_;
  // Reused between steps so a step allocates nothing once warm.
  std::vector<int32_t> ids_, positions_, query_start_, seq_lens_, tables_, logits_rows_;
  std::vector<int64_t> slots_;
  std::vector<DeviceDraw> draws_;
  int max_blocks_ = 1;

  [[nodiscard]] ForwardBatch batch() const;
};

}  // namespace pagoda
