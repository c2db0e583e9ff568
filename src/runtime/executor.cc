#include "runtime/executor.h"

#include <fmt/format.h>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/config_reader.h"
#include "model/eagle_head.h"
#include "model/rope.h"
#include "runtime/device_model.h"
#include "runtime/in_process_executor.h"
#include "runtime/process_executor.h"

namespace pagoda {
namespace {

// A parallel drafter's mask token: config.json's mask_token_id; a dummy draft without one
// (--load-format dummy of any Llama config) uses the last id of the vocabulary.
int32_t parallel_mask_token(const Model& draft, const ExecutorOptions& options) {
  const ModelConfig& c = draft.config();
  const ConfigReader reader(*c.json, c.source);
  const bool dummy = options.draft_load.format == LoadFormat::kDummy;
  if (!reader.has("mask_token_id") && !dummy) {
    reader.fail("mask_token_id", "is missing (a parallel drafter's mask token)");
  }
  const int64_t id = reader.optional_int("mask_token_id", c.vocab_size - 1, 0);
  if (id >= c.vocab_size) {
    reader.fail("mask_token_id", fmt::format("is {}, past the vocabulary of {}", id, c.vocab_size));
  }
  return static_cast<int32_t>(id);
}

}  // namespace

InProcessExecutor::InProcessExecutor(const ExecutorOptions& options)
    : pool_(options.num_threads),
      model_(load_model_on_device(options.model_dir, options.load, options.device, pool_)) {
  info_.kv_spec = model_->kv_cache_spec();
  info_.on_device = model_->device_memory().has_value();
  info_.vocab_size = model_->config().vocab_size;
  if (options.draft_model_dir.empty()) return;
  const std::string& method = options.draft_method;
  const bool eagle = method == "eagle" || method == "eagle3";
  if (!eagle && method != "draft_model" && method != "parallel_draft") {
    throw InvalidArgument(fmt::format("speculative_config.method '{}' has no draft model", method));
  }
  // The draft model (draft-model speculation): errors name the configuration key.
  try {
    // On the target's device (an EAGLE head reads the target's hidden states).
    draft_ = eagle ? load_eagle_head_on_device(options.draft_model_dir,
                                               {method == "eagle" ? 1 : 3, options.model_dir},
                                               options.draft_load, options.device, pool_)
                   : load_model_on_device(options.draft_model_dir, options.draft_load,
                                          options.device, pool_);
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
  if (method == "parallel_draft") mask_token_ = parallel_mask_token(*draft_, options);
  info_.draft_kv_spec = draft_->kv_cache_spec();
  info_.draft_context = rope_context_length(draft_->config().rope);
}

double InProcessExecutor::profile_run(int64_t max_tokens, int max_num_seqs, int64_t max_model_len,
                                      int block_size) {
  double seconds =
      pagoda::profile_run(*model_, max_tokens, max_num_seqs, max_model_len, block_size);
  if (!draft_) return seconds;
  // An EAGLE head reads zero hidden states of its widest input (EAGLE-3: fc's three target
  // layers); on the CPU it needs no profile run (nothing is sized from it).
  const std::optional<EagleHeadDef>& eagle = draft_->definition().eagle;
  if (eagle && !info_.on_device) return seconds;
  draft_->init_kv_cache(2, block_size);
  // EAGLE-1's fc reads [embed | h] (2 hidden): h is half of it.
  const int64_t width = !eagle ? 0 : eagle->version == 1 ? eagle->fc.in / 2 : eagle->fc.in;
  seconds +=
      pagoda::profile_run(*draft_, max_tokens, max_num_seqs, max_model_len, block_size, width);
  return seconds;
}

void InProcessExecutor::init_kv_cache(int64_t num_blocks, int block_size) {
  PAGODA_CHECK(!runner_ || !runner_->in_flight(), "init_kv_cache while a step is in flight");
  model_->init_kv_cache(num_blocks, block_size);
  if (draft_) draft_->init_kv_cache(num_blocks, block_size);
  runner_ = std::make_unique<ModelRunner>(*model_, block_size, draft_.get(), mask_token_);
}

int InProcessExecutor::capture_graphs(int max_num_seqs) {
  // With an EAGLE head every target step keeps the head's layers: its graphs have them.
  std::vector<int32_t> layers;
  if (draft_ && draft_->definition().eagle) layers = draft_->definition().eagle->target_layers;
  const int graphs = capture_decode_graphs(*model_, max_num_seqs, layers);
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
  if (options.decode_context_parallel_size < 1 ||
      options.tensor_parallel_size % options.decode_context_parallel_size != 0) {
    throw InvalidArgument(
        fmt::format("--decode-context-parallel-size {}: must divide --tensor-parallel-size {}",
                    options.decode_context_parallel_size, options.tensor_parallel_size));
  }
  if (options.backend == "uni") return std::make_unique<InProcessExecutor>(options);
  if (options.backend == "mp") return start_process_executor(options);
  throw InvalidArgument(fmt::format(
      "--distributed-executor-backend '{}' must be uni (in-process) or mp (a worker process)",
      options.backend));
}

}  // namespace pagoda
