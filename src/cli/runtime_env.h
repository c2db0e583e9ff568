#pragma once
// The PAGODA_* environment variables that tune or A/B the runtime (docs/engine.md lists them),
// read once at the command line into RuntimeOptions, which the engine passes down.
#include <cstdint>

#include "pagoda/runtime_options.h"

namespace pagoda {

/// Whether `name` is set to anything but "" or "0"; `fallback` when unset or empty.
[[nodiscard]] bool env_flag(const char* name, bool fallback);

/// The integer value of `name`, `fallback` when unset or empty; InvalidArgument naming the
/// variable when it is not an integer in [lo, hi].
[[nodiscard]] int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi);

/// `base` with every knob the environment sets (PAGODA_ENFORCE_EAGER, PAGODA_CUBLASLT_TUNING,
/// PAGODA_HOST_SAMPLING, PAGODA_DISABLE_GEMV_FUSION, PAGODA_GEMV_MMA_MAX_M / _ROWS / _STEPS,
/// PAGODA_ATTENTION_MIN_SPLIT_KEYS, PAGODA_PDL, PAGODA_LOAD_PINNED, PAGODA_LOAD_BUFFERS,
/// PAGODA_LOAD_BUFFER_MIB, PAGODA_CUBLASLT_TUNING_CACHE, else the XDG cache directory for the
/// tuning cache); InvalidArgument naming a variable out of its range.
[[nodiscard]] RuntimeOptions runtime_options_from_env(RuntimeOptions base = {});

}  // namespace pagoda
