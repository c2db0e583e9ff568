#include "server/work_queue.h"

#include <exception>

#include "core/logging.h"
#include "core/status.h"

namespace pagoda::server {

WorkQueue::WorkQueue(int num_threads, size_t max_pending) : max_pending_(max_pending) {
  PAGODA_CHECK(num_threads >= 1, "a work queue needs a thread, got {}", num_threads);
  threads_.reserve(static_cast<size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { run(); });
}

WorkQueue::~WorkQueue() { stop(); }

bool WorkQueue::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || tasks_.size() >= max_pending_) return false;
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
  return true;
}

void WorkQueue::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

size_t WorkQueue::pending() const {
  std::lock_guard lock(mutex_);
  return tasks_.size();
}

void WorkQueue::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left to run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("server: a request task failed: {}", e.what());
    } catch (...) {
      spdlog::error("server: a request task failed");
    }
  }
}

}  // namespace pagoda::server
