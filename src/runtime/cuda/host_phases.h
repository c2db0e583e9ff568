#pragma once
// Host time of a step's launch by phase, logged at debug level when the launch is slow: a launch
// that takes longer than the device step it feeds idles the GPU (docs/benchmarks.md found the
// lazy loading of cuBLASLt kernels this way).
#include <chrono>
#include <cstdint>

#include "core/logging.h"

namespace pagoda {

class HostPhases {
 public:
  /// Ends the current phase: buffers, then inputs and plan, then kernels or graph.
  void mark() { marks_[n_ < 3 ? n_++ : 2] = Clock::now(); }
  /// Ends the last phase (sampling and copies) and logs the four when they took >= 2 ms.
  void log(int64_t tokens, bool graph) const {
    const Clock::time_point end = Clock::now();
    auto ms = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    if (n_ < 3 || ms(start_, end) < 2.0) return;
    spdlog::debug(
        "slow launch of {} tokens: buffers {:.2f} ms, inputs and plan {:.2f} ms, {} {:.2f} ms, "
        "sampling and copies {:.2f} ms",
        tokens, ms(start_, marks_[0]), ms(marks_[0], marks_[1]), graph ? "graph" : "kernels",
        ms(marks_[1], marks_[2]), ms(marks_[2], end));
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
  Clock::time_point marks_[3];
  int n_ = 0;
};

}  // namespace pagoda
