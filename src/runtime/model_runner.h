#pragma once
// ModelRunner: turns a StepPlan into the flat varlen ForwardBatch of one Model, runs it and hands
// back the StepResult. It keeps each sequence's block table across steps (the plan carries only
// the changes) and runs on the thread that owns the model (the engine's, or a worker process's).
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/model.h"
#include "runtime/draft_proposer.h"
#include "runtime/eagle_proposer.h"
#include "runtime/step.h"

namespace pagoda {

/// Runs the steps of one model whose KV cache is initialised. Not thread-safe.
class ModelRunner {
 public:
  /// draft: the draft model of draft-model speculation (runtime/draft_proposer.h; with
  /// mask_token, a parallel drafter), or an EAGLE head (runtime/eagle_proposer.h, when its
  /// definition has one), its KV cache of the target's block count; or null.
  ModelRunner(Model& model, int block_size, Model* draft = nullptr,
              std::optional<int32_t> mask_token = std::nullopt);

  [[nodiscard]] StepResult execute(StepPlan plan) {
    launch(std::move(plan));
    return wait();
  }

  /// execute() in two halves: launch() builds the batch and starts the device on it (it keeps the
  /// plan until wait()), wait() blocks until its results are ready. The engine emits the
  /// previous step's tokens in between, while the device computes. Invalid plans (a row past its
  /// tokens, a table too short for the positions, an unknown sequence's continuation) throw
  /// before anything runs.
  void launch(StepPlan plan);
  [[nodiscard]] StepResult wait();
  [[nodiscard]] bool in_flight() const { return in_flight_; }

  /// The block table the runner holds for a sequence (tests).
  [[nodiscard]] std::span<const int32_t> block_table(uint64_t id) const;

 private:
  [[nodiscard]] ForwardBatch batch() const;

  Model& model_;
  int block_size_;
  std::optional<DraftProposer> drafter_;
  std::optional<EagleProposer> eagle_;
  bool in_flight_ = false;
  bool synchronous_ = false;  // the model computes in wait() (Model::start_step returned false)
  StepResult pending_;
  std::unordered_map<uint64_t, std::vector<int32_t>> tables_;  // per sequence, across steps
  // The batch of the step in flight, reused between steps so a step allocates nothing once warm.
  // Example: sequences A (computed 5, tokens [a5, a6]) and B (computed 9, tokens [b9]) with one
  // row each give ids [a5, a6, b9], positions [5, 6, 9], query_start [0, 2, 3], seq_lens [7, 10],
  // logits rows [1, 2].
  std::vector<int32_t> ids_, positions_, query_start_, seq_lens_, tables_flat_, logits_rows_;
  std::vector<int32_t> hidden_layers_;  // the plan's, then the EAGLE head's target layers
  size_t plan_hidden_layers_ = 0;       // of hidden_layers_, the plan's
  std::vector<int64_t> slots_;
  StepPlan plan_;                  // the step in flight (its rows back draws_)
  std::vector<DeviceDraw> draws_;  // [logits rows]: views of plan_'s RowDraws
  int max_blocks_ = 1;
};

}  // namespace pagoda
