#pragma once
// A request's output channel: the engine thread pushes updates, a client thread pops them.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "pagoda/request_output.h"

namespace pagoda {

/// A thread-safe queue of RequestOutputs for one request; closed when all its completions finish.
/// Consumers either block in next(), or (event loops) register a listener and drain with
/// try_next().
class OutputStream {
 public:
  void push(RequestOutput output) {
    std::function<void()> listener;
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(output));
      listener = listener_;
    }
    ready_.notify_all();
    if (listener) listener();
  }
  void close() {
    std::function<void()> listener;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      listener = listener_;
    }
    ready_.notify_all();
    if (listener) listener();
  }
  /// Calls `listener` (on the engine thread: it must only post work elsewhere, never block) after
  /// every push and at close; once at registration too if anything is already waiting.
  void set_listener(std::function<void()> listener) {
    bool pending = false;
    {
      std::lock_guard lock(mutex_);
      listener_ = listener;
      pending = !queue_.empty() || closed_;
    }
    if (pending && listener) listener();
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
  std::function<void()> listener_;
};

}  // namespace pagoda
