#pragma once
// A request's output channel: the engine thread pushes updates, a client thread pops them.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "pagoda/request_output.h"

namespace pagoda {

/// A thread-safe queue of RequestOutputs for one request; closed when all its completions finish.
class OutputStream {
 public:
  void push(RequestOutput output) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(output));
    }
    ready_.notify_all();
  }
  void close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }
  /// The next update, waiting for it; nullopt once the stream is closed and drained.
  [[nodiscard]] std::optional<RequestOutput> next() {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return !queue_.empty() || closed_; });
    return pop_locked();
  }
  /// The next update if one is ready; never waits.
  [[nodiscard]] std::optional<RequestOutput> try_next() {
    std::lock_guard lock(mutex_);
    return pop_locked();
  }
  [[nodiscard]] bool finished() const {
    std::lock_guard lock(mutex_);
    return closed_ && queue_.empty();
  }

 private:
  std::optional<RequestOutput> pop_locked() {
    if (queue_.empty()) return std::nullopt;
    RequestOutput out = std::move(queue_.front());
    queue_.pop_front();
    return out;
  }

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestOutput> queue_;
  bool closed_ = false;
};

}  // namespace pagoda
