#pragma once
// Executor: where the engine's steps run. The engine only plans (runtime/step.h) and reads
// results; an executor owns the model and its KV memory on its devices, starts them (load, profile
// run, KV allocation, graph capture) and runs each StepPlan. Two exist:
//  - in-process (make_executor with ExecutorOptions::backend "uni", vLLM's name): the model on
//    the engine's own thread;
//  - worker processes ("mp"): one process per tensor-parallel rank (-tp N; one by default), the
//    plan serialised over a socket to each and rank 0's results read from shared memory
//    (runtime/process_executor.cc).
// Both run the same ModelRunner, so their outputs are identical.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "kv/kv_cache_spec.h"
#include "model/config.h"
#include "model/model.h"
#include "runtime/step.h"

namespace pagoda {

/// What an executor is asked to start.
struct ExecutorOptions {
  std::string model_dir;
  LoadOptions load;
  std::string device = "auto";  // auto, cpu or cuda
  int num_threads = 0;          // CPU threads of the model's pool (0: all cores)
  std::string backend = "uni";  // uni: in-process; mp: a worker process per rank
  // --tensor-parallel-size: worker processes (backend mp), each holding one rank's slices of
  // the model (model/tensor_parallel.h); on GPUs rank r on GPU r % device count.
  int tensor_parallel_size = 1;
  // --decode-context-parallel-size: groups of this many ranks spread each sequence's KV by
  // position (model/context_parallel.h); divides tensor_parallel_size.
  int decode_context_parallel_size = 1;
  // Speculation by a model in the executor: the draft's directory (empty: none), loaded with
  // draft_load, its KV cache of the target's blocks. draft_method (SpeculativeConfig::method):
  // draft_model and parallel_draft (runtime/draft_proposer.h), eagle and eagle3
  // (runtime/eagle_proposer.h), all on the target's device.
  std::string draft_model_dir;
  std::string draft_method = "draft_model";
  LoadOptions draft_load;
};

/// Facts of the started model the engine needs.
struct ExecutorInfo {
  kv::KVCacheSpec kv_spec;  // one rank's: its KV heads (with -tp N, KV heads / N or 1)
  int tensor_parallel_size = 1;
  bool on_device = false;  // the model lives in device memory (sized by a profile run)
  int64_t vocab_size = 0;
  // With a draft model: what its KV cache holds per token (the pool holds both models' bytes per
  // token) and its context length (rope_context_length of its config).
  std::optional<kv::KVCacheSpec> draft_kv_spec;
  int64_t draft_context = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;

  [[nodiscard]] virtual const ModelConfig& config() const = 0;
  [[nodiscard]] virtual const ExecutorInfo& info() const = 0;
  /// Empty while the executor can run steps; else why it cannot any more (a tensor-parallel rank
  /// that exited, naming it). Any thread may ask.
  [[nodiscard]] virtual std::string failure() const { return {}; }
  /// Free and total bytes of the device (nullopt on the CPU).
  [[nodiscard]] virtual std::optional<std::pair<size_t, size_t>> device_memory() = 0;
  /// vLLM's profile run (runtime/device_model.h): the largest step at its peak memory. Seconds.
  virtual double profile_run(int64_t max_tokens, int max_num_seqs, int64_t max_model_len,
                             int block_size) = 0;
  /// Allocates the KV cache (replacing any previous one).
  virtual void init_kv_cache(int64_t num_blocks, int block_size) = 0;
  /// Captures the decode graphs up to max_num_seqs sequences; returns how many.
  virtual int capture_graphs(int max_num_seqs) = 0;

  /// Starts a step; results with wait(). One step in flight at a time.
  virtual void launch(StepPlan plan) = 0;
  /// The launched step's results; spans valid until the next launch. Rethrows the step's error.
  [[nodiscard]] virtual StepResult wait() = 0;
  [[nodiscard]] virtual bool in_flight() const = 0;

  /// A KV block's bytes (kv_spec.block_bytes(block_size)) out of and into the cache.
  virtual void export_kv_block(int32_t block, std::span<std::byte> out) = 0;
  virtual void import_kv_block(int32_t block, std::span<const std::byte> in) = 0;
  /// A batch of blocks out of and into the cache, between steps (none in flight): blocks[i]'s
  /// bytes at [i * B, (i + 1) * B) of out / in, B = kv_spec.block_bytes(block_size)
  /// (Model::save_kv_blocks). The host KV tier's copies: the saves of the blocks the next step
  /// overwrites, then the loads of the blocks it reads, one call each per step.
  virtual void save_kv_blocks(std::span<const int32_t> blocks, std::span<std::byte> out) = 0;
  virtual void load_kv_blocks(std::span<const int32_t> blocks, std::span<const std::byte> in) = 0;
};

/// Starts the executor options.backend names; InvalidArgument for an unknown backend, and what
/// loading the model throws.
[[nodiscard]] std::unique_ptr<Executor> make_executor(const ExecutorOptions& options);

}  // namespace pagoda
