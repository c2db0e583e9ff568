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
  bool no_prefix_caching = false;
  bool prefix_caching = false;

  /// Throws InvalidArgument naming the flag.
  [[nodiscard]] EngineArgs to_engine_args() const;
};

/// Adds the engine flags to a subcommand. `model_flag`: add --model (serve takes it positionally).
void add_engine_flags(CLI::App* cmd, EngineFlags& flags, bool model_flag = true);

}  // namespace pagoda::cli
