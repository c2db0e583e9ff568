#pragma once
// One UCP context and worker driven by a thread of its own: the event loop of the UCX transport
// (ucx_transport.h).
//
// How it works. The loop thread alone touches the worker (UCS_THREAD_MODE_SINGLE). Each round it
// runs the tasks other threads posted, progresses the worker until it has nothing left to do
// (UCX runs its callbacks from there), then calls `tick`, which does the owner's timed work and
// says when it wants to run next. Then it sleeps: ucp_worker_arm, and poll() on the worker's event
// fd and an eventfd that post() and stop() write, for at most the time `tick` asked for. So an idle
// transport costs no CPU, and every wait is bounded by the owner's deadlines.
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ucp/api/ucp.h>

#include "kv_transfer/transport.h"

namespace pagoda::kv_transfer {

class UcxWorker {
 public:
  using Clock = std::chrono::steady_clock;

  /// Creates the context (active messages, RMA, wakeup) and the worker. Throws InvalidArgument
  /// naming `options.tls` when UCX refuses it, Error when UCX cannot start.
  explicit UcxWorker(const UcxOptions& options);
  /// stop() must have been called (the owner cleans its endpoints up in between).
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  [[nodiscard]] ucp_context_h context() const { return context_; }
  [[nodiscard]] ucp_worker_h worker() const { return worker_; }
  /// Registers `cb` (with `arg`) for the active messages of `id`, delivered whole. Throws Error
  /// when UCX refuses.
  void set_am_handler(unsigned id, ucp_am_recv_callback_t cb, void* arg);

  /// Starts the loop thread. `tick` runs on it after each progress round and returns when it
  /// wants to run again (the loop wakes up for that at the latest).
  void start(std::function<Clock::time_point()> tick);
  /// Runs `task` on the loop thread (thread-safe).
  void post(std::function<void()> task);
  /// Ends the loop thread (tasks not yet run are dropped). The worker stays usable from the
  /// calling thread: drain() then finishes the owner's operations.
  void stop();
  /// After stop(): progresses the worker until `idle()` holds, waiting on its events between
  /// rounds; gives up after `max_rounds` rounds that made no progress (a peer that never answers
  /// a close), so a destructor always ends.
  void drain(const std::function<bool()>& idle, int max_rounds = 200);

 private:
  void loop();
  void wait(std::chrono::milliseconds timeout);

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int worker_fd_ = -1;  // the worker's event fd (ucp_worker_get_efd)
  int wake_fd_ = -1;    // an eventfd: post() and stop() wake the loop through it
  std::function<Clock::time_point()> tick_;
  std::mutex mutex_;
  std::vector<std::function<void()>> tasks_;  // posted, not yet run
  bool stopping_ = false;
  std::thread thread_;
};

/// Starts a UCX operation and runs `then(status)` once it has ended: at once (on this thread)
/// when it ends immediately or fails to start, else from the worker's progress. `start` gets the
/// request parameters to pass on: `base` plus a send callback and its user data. The request is
/// freed here.
void ucx_call(ucp_request_param_t base,
              const std::function<ucs_status_ptr_t(const ucp_request_param_t&)>& start,
              std::function<void(ucs_status_t)> then);

}  // namespace pagoda::kv_transfer
