#pragma once
// The in-process executor: the model, its ModelRunner and its thread pool in the caller's process
// (the engine thread drives them). The worker process of process_executor.cc runs one too.
#include <memory>
#include <optional>
#include <utility>

#include "core/thread_pool.h"
#include "runtime/executor.h"
#include "runtime/model_runner.h"

namespace pagoda {

class InProcessExecutor final : public Executor {
 public:
  /// Loads the model (throws what loading throws).
  explicit InProcessExecutor(const ExecutorOptions& options);

  const ModelConfig& config() const override { return model_->config(); }
  const ExecutorInfo& info() const override { return info_; }
  std::optional<std::pair<size_t, size_t>> device_memory() override {
    return model_->device_memory();
  }
  double profile_run(int64_t max_tokens, int max_num_seqs, int64_t max_model_len,
                     int block_size) override;
  void init_kv_cache(int64_t num_blocks, int block_size) override;
  int capture_graphs(int max_num_seqs) override;
  void launch(StepPlan plan) override;
  StepResult wait() override;
  bool in_flight() const override { return runner_ && runner_->in_flight(); }
  void export_kv_block(int32_t block, std::span<std::byte> out) override {
    model_->export_kv_block(block, out);
  }
  void import_kv_block(int32_t block, std::span<const std::byte> in) override {
    model_->import_kv_block(block, in);
  }
  void save_kv_blocks(std::span<const int32_t> blocks, std::span<std::byte> out) override {
    PAGODA_CHECK(!in_flight(), "save_kv_blocks while a step is in flight");
    model_->save_kv_blocks(blocks, out);
  }
  void load_kv_blocks(std::span<const int32_t> blocks, std::span<const std::byte> in) override {
    PAGODA_CHECK(!in_flight(), "load_kv_blocks while a step is in flight");
    model_->load_kv_blocks(blocks, in);
  }

 private:
  ThreadPool pool_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> draft_;         // draft model, parallel drafter or EAGLE head; or null
  std::optional<int32_t> mask_token_;    // a parallel drafter's mask token id
  std::unique_ptr<ModelRunner> runner_;  // from init_kv_cache on
  ExecutorInfo info_;
};

}  // namespace pagoda
