#pragma once
// WorkQueue: a few threads that run the CPU-heavy part of requests (parsing, chat template
// rendering, tokenization) away from the HTTP io threads, so that one costly request never
// stalls the reading, writing and /health answers of every other connection.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda::server {

class WorkQueue {
 public:
  /// `num_threads` >= 1 threads; at most `max_pending` tasks wait (post() refuses past it).
  WorkQueue(int num_threads, size_t max_pending);
  /// stop().
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  /// Queues `task`; false (and `task` dropped) when max_pending tasks wait or after stop().
  /// Tasks run in order of posting on whichever thread is free; they must catch their own
  /// exceptions (one that escapes is logged and dropped).
  [[nodiscard]] bool post(std::function<void()> task);
  /// Runs the tasks already queued, then joins the threads. Idempotent.
  void stop();
  /// Tasks queued and not yet started.
  [[nodiscard]] size_t pending() const;

 private:
  void run();

  size_t max_pending_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace pagoda::server
