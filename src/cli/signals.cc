#include "cli/signals.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "core/status.h"

namespace pagoda::cli {
namespace {

// The signal handler can reach only globals; it writes one byte to a pipe that the main thread
// waits on (write() is async-signal-safe, condition variables are not). A second signal skips
// the graceful part.
int g_signal_pipe[2] = {-1, -1};
std::atomic<int> g_signals{0};

void on_signal(int) {
  if (g_signals.fetch_add(1) >= 1) ::_exit(130);
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
}

}  // namespace

void install_signal_handlers() {
  if (g_signal_pipe[0] < 0 && ::pipe(g_signal_pipe) != 0) {
    throw Internal("pipe() failed for the signal handler");
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

void wait_for_signal() {
  char byte = 0;
  while (::read(g_signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
}

bool wait_for_signal_or(const std::function<bool()>& stop, std::chrono::milliseconds every) {
  for (;;) {
    pollfd p{g_signal_pipe[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(every.count()));
    if (ready > 0) {
      wait_for_signal();  // the byte is there: reads it at once
      return true;
    }
    if (ready < 0 && errno != EINTR) throw Internal("poll() failed on the signal pipe");
    if (stop()) return false;
  }
}

}  // namespace pagoda::cli
