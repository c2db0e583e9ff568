#pragma once
// SIGINT/SIGTERM for the long-running commands (serve, router): the first signal wakes
// wait_for_signal() for a graceful shutdown, a second one exits at once (status 130). SIGPIPE is
// ignored (a peer gone mid-write is an error code, not a signal).
#include <chrono>
#include <functional>

namespace pagoda::cli {

/// Installs the handlers; call once, before wait_for_signal(). Throws Internal if it cannot.
void install_signal_handlers();
/// Blocks until the first SIGINT or SIGTERM.
void wait_for_signal();
/// Blocks until the first SIGINT or SIGTERM (true) or until `stop` returns true, asked every
/// `every` (false).
bool wait_for_signal_or(const std::function<bool()>& stop, std::chrono::milliseconds every);

}  // namespace pagoda::cli
