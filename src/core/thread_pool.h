#pragma once
// A fixed pool of worker threads for data-parallel loops in the CPU kernels. The calling thread
// takes part in every loop, so a pool of N threads has N-1 workers.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda {

/// Runs parallel_for loops over a fixed set of threads; one loop at a time.
class ThreadPool {
 public:
  /// num_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] int num_threads() const { return num_threads_; }

  /// Splits [0, n) into contiguous ranges, at least `grain` items each, and calls fn(begin, end)
  /// for each range, in parallel. Returns when all ranges are done. An exception in fn is rethrown
  /// here.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  /// Calls fn(thread_index, num_threads) once on every thread: for kernels that partition work
  /// themselves.
  void run_on_all(const std::function<void(int, int)>& fn);

 private:
  void worker_loop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int, int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::mutex loop_mutex_;  // serialises callers: one loop at a time
};

}  // namespace pagoda
