#pragma once
// The PAGODA_* environment variables that tune or A/B the runtime (docs/engine.md lists
// them). Read once, when the object that uses them is built.
#include <cstdint>

namespace pagoda {

/// Whether `name` is set to anything but "" or "0"; `fallback` when unset or empty.
[[nodiscard]] bool env_flag(const char* name, bool fallback);

/// The integer value of `name`, `fallback` when unset or empty; InvalidArgument naming the
/// variable when it is not an integer in [lo, hi].
[[nodiscard]] int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi);

}  // namespace pagoda
