#include "engine/stop_checker.h"

#include <algorithm>
#include <utility>

namespace pagoda {

std::string StopChecker::add(const std::string& delta, bool armed) {
  if (matched_) return "";
  pending_ += delta;
  if (stop_.empty()) return std::exchange(pending_, std::string());
  // The earliest match wins; on a tie at one position, the longest stop string.
  size_t best = std::string::npos;
  if (armed) {
    for (const std::string& s : stop_) {
      const size_t at = pending_.find(s);
      if (at != std::string::npos && (at < best || (at == best && s.size() > matched_->size()))) {
        best = at;
        matched_ = s;
      }
    }
  }
  if (best != std::string::npos) {
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stop_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopChecker::flush() {
  if (matched_) return "";
  return std::exchange(pending_, std::string());
}

}  // namespace pagoda
