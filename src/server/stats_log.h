#pragma once
// The periodic engine-stats line of `pagoda serve` (vLLM's LoggingStatLogger): every interval in
// which the engine did anything, one line with the prompt and generation throughput over the
// interval, the running and waiting requests, KV cache usage and the prefix cache hit rate.
// `--disable-log-stats` turns it off, as in vLLM.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/engine_core.h"

namespace pagoda::server {

/// The line for the interval between two stats snapshots `seconds` apart; nullopt when the engine
/// was idle throughout (no tokens, nothing running or waiting at either end).
[[nodiscard]] std::optional<std::string> stats_line(const EngineStats& before,
                                                    const EngineStats& now, double seconds);

/// Logs stats_line() at info level every `interval` on its own thread, until destroyed.
class StatsLogger {
 public:
  /// The engine must outlive the logger.
  StatsLogger(const EngineCore& engine, std::chrono::milliseconds interval);
  ~StatsLogger();
  StatsLogger(const StatsLogger&) = delete;
  StatsLogger& operator=(const StatsLogger&) = delete;

 private:
  void run();

  const EngineCore& engine_;
  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pagoda::server
