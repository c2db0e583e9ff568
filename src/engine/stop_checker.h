#pragma once
// Stop strings over streamed text: a match ends the completion and is cut from the output; text
// that could still be the start of a stop string is held back until it can no longer match.
#include <optional>
#include <string>
#include <vector>

namespace pagoda {

/// Tracks one completion's text against its stop strings.
class StopChecker {
 public:
  explicit StopChecker(std::vector<std::string> stop) : stop_(std::move(stop)) {}

  /// Appends new text; returns the text that is now safe to emit. While `armed` is false (fewer
  /// than min_tokens generated, as vLLM rules) no match ends the completion, but a possible start
  /// of a stop string is still held back so that a match completed later is cut whole.
  [[nodiscard]] std::string add(const std::string& delta, bool armed = true);
  /// The stop string matched by the text so far, if any (the text after it is dropped).
  [[nodiscard]] const std::optional<std::string>& matched() const { return matched_; }
  /// Ends the completion: returns what was held back (nothing if a stop string matched).
  [[nodiscard]] std::string flush();

 private:
  std::vector<std::string> stop_;
  std::string pending_;  // not yet emitted: a possible start of a stop string
  std::optional<std::string> matched_;
};

}  // namespace pagoda
