#pragma once
// The engine flags that `generate`, `bench throughput` and `serve` share, with vLLM's names.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "pagoda/engine_args.h"

namespace pagoda::cli {

/// Flag values as parsed; to_engine_args() checks and converts them.
struct EngineFlags {
  EngineArgs args;
  std::string kv_cache_memory = "auto";
  std::string kv_offloading_size = "0";          // GiB (vLLM's), or a size such as 512M
  std::string kv_offloading_backend = "native";  // vLLM's; only native (pagoda's host tier)
  std::string speculative_config;            // --speculative-config JSON (cli/speculative_config.h)
  std::string distributed_executor_backend;  // empty: uni, or mp with --tensor-parallel-size > 1
  bool no_prefix_caching = false;
  bool prefix_caching = false;
  // vLLM flags that launch scripts carry, accepted so that those scripts run unchanged: with
  // their effect where pagoda has it, a warning where it has no meaning here, and an error
  // naming the flag where pagoda cannot do what it asks (docs/engine.md, "vLLM's flags").
  int tensor_parallel_size = 1;
  int decode_context_parallel_size = 1;
  int pipeline_parallel_size = 1;
  int data_parallel_size = 1;
  std::string quantization;
  std::string tokenizer_mode = "auto";
  bool trust_remote_code = false;
  bool enable_chunked_prefill = false;
  bool no_enable_chunked_prefill = false;
  double swap_space = -1;
  std::string revision;            // of a Hub model (cli/hub_env.h); default main
  std::string tokenizer_revision;  // of a Hub --tokenizer; default main
  std::string download_dir;        // the Hugging Face cache to use in place of HF_HUB_CACHE

  /// Throws InvalidArgument naming the flag. A model or tokenizer that is a Hub repo id stays
  /// as given: resolve_model_sources (cli/hub_env.h) turns it into a local directory.
  [[nodiscard]] EngineArgs to_engine_args() const;
};

/// --kv-offloading-size in bytes: a plain number is GiB as in vLLM ("8", "0.5"), a number with a
/// unit a memory size ("512M", "2G"; kv/memory_size.h). InvalidArgument naming the flag for
/// anything else (negative, not a number).
[[nodiscard]] int64_t parse_kv_offloading_size(const std::string& text);

/// Adds the engine flags to a subcommand. `model_flag`: add --model (serve takes it positionally).
void add_engine_flags(CLI::App* cmd, EngineFlags& flags, bool model_flag = true);

}  // namespace pagoda::cli
