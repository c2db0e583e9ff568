#include "runtime/executor.h"

#include <fmt/format.h>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/rope.h"
#include "runtime/device_model.h"
#include "runtime/in_process_executor.h"
#include "runtime/process_executor.h"

namespace pagoda {

InProcessExecutor::InProcessExecutor(const ExecutorOptions& options)
    : pool_(options.num_threads),
      model_(load_model_on_device(options.model_dir, options.load, options.device, pool_)) {
  info_.kv_spec = model_->kv_cache_spec();
  info_.on_device = model_->device_memory().has_value();
  info_.vocab_size = model_->config().vocab_size;
  if (options.draft_model_dir.empty()) return;
  // The draft model (draft-model speculation): errors name the configuration key.
  try {
    draft_ =
        load_model_on_device(options.draft_model_dir, options.draft_load, options.device, pool_);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("speculative_config.model: {}", e.what()));
  } catch (const NotFound& e) {
    throw NotFound(fmt::format("speculative_config.model: {}", e.what()));
  }
  if (draft_->config().vocab_size != info_.vocab_size) {
    throw InvalidArgument(fmt::format(
        "speculative_config.model {}: the draft's vocab_size {} differs from the target's {} "
        "(a draft model must share the target's vocabulary)",
        options.draft_model_dir, draft_->config().vocab_size, info_.vocab_size));
  }
  info_.draft_kv_spec = draft_->kv_cache_spec();
  info_.draft_context = rope_context_length(draft_->config().rope);
}

double InProcessExecutor::profile_run(int64_t max_tokens, int max_num_seqs, int64_t max_model_len,
                                      int block_size) {
  double seconds =
      pagoda::profile_run(*model_, max_tokens, max_num_seqs, max_model_len, block_size);
  if (draft_) {
    draft_->init_kv_cache(2, block_size);
    seconds += pagoda::profile_run(*draft_, max_tokens, max_num_seqs, max_model_len, block_size);
  }
  return seconds;
}

void InProcessExecutor::init_kv_cache(int64_t num_blocks, int block_size) {
  PAGODA_CHECK(!runner_ || !runner_->in_flight(), "init_kv_cache while a step is in flight");
  model_->init_kv_cache(num_blocks, block_size);
  if (draft_) draft_->init_kv_cache(num_blocks, block_size);
  runner_ = std::make_unique<ModelRunner>(*model_, block_size, draft_.get());
}

int InProcessExecutor::capture_graphs(int max_num_seqs) {
  const int graphs = capture_decode_graphs(*model_, max_num_seqs);
  model_->end_warm_up();
  return graphs;
}

void InProcessExecutor::launch(StepPlan plan) {
  PAGODA_CHECK(runner_ != nullptr, "launch before init_kv_cache");
  runner_->launch(std::move(plan));
}

StepResult InProcessExecutor::wait() {
  PAGODA_CHECK(runner_ != nullptr, "wait before init_kv_cache");
  return runner_->wait();
}

std::unique_ptr<Executor> make_executor(const ExecutorOptions& options) {
  if (options.tensor_parallel_size < 1) {
    throw InvalidArgument(
        fmt::format("--tensor-parallel-size {}: must be at least 1", options.tensor_parallel_size));
  }
  if (options.tensor_parallel_size > 1) {
    if (options.backend != "mp") {
      throw InvalidArgument(
          fmt::format("--tensor-parallel-size {} runs one worker process per rank: "
                      "--distributed-executor-backend mp, not {}",
                      options.tensor_parallel_size, options.backend));
    }
    if (!options.draft_model_dir.empty()) {
      throw InvalidArgument(fmt::format(
          "--tensor-parallel-size {}: a draft model (speculative_config.model) is not sharded "
          "yet; ngram speculation works",
          options.tensor_parallel_size));
    }
  }
  if (options.backend == "uni") return std::make_unique<InProcessExecutor>(options);
  if (options.backend == "mp") return start_process_executor(options);
  throw InvalidArgument(fmt::format(
      "--distributed-executor-backend '{}' must be uni (in-process) or mp (a worker process)",
      options.backend));
}

}  // namespace pagoda
