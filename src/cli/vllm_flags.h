#pragma once
// vLLM's `vllm serve` flags that pagoda does not implement, so that a vLLM launch command either
// runs unchanged or stops with a message naming the flag and why: flags without effect on what a
// client gets (logging, docs pages, scheduling internals) are accepted and noted in the log; the
// rest of vLLM's known flags are refused (exit 2) instead of CLI11's generic "not expected".
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace pagoda::cli {

/// What the registered flags saw on the command line.
struct VllmCompatFlags {
  std::vector<std::string> accepted;  // given flags with no effect here
  std::vector<std::string> refused;   // given flags pagoda cannot honour
  /// Logs the accepted ones; throws InvalidArgument naming the first refused one and why.
  void check() const;
};

/// Registers the flags on `cmd` (group "vLLM compatibility"). `server`: the API server's flags too
/// (serve), not only the engine's.
void add_vllm_compat_flags(CLI::App* cmd, const std::shared_ptr<VllmCompatFlags>& seen,
                           bool server);

}  // namespace pagoda::cli
