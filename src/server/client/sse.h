#pragma once
// Incremental parsing of a text/event-stream body, as the OpenAI streaming endpoints send it.
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::client {

/// Splits bytes, fed as they arrive, into server-sent events and returns each event's data.
class SseParser {
 public:
  /// Appends `bytes` and returns the data of every event completed by them (multi-line data joined
  /// with '\n'; comments and events without data are skipped). Accepts \n, \r\n and \r endings.
  [[nodiscard]] std::vector<std::string> feed(std::string_view bytes);

 private:
  void end_line();

  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool after_cr_ = false;  // a '\r' ended the previous line: a following '\n' belongs to it
  std::vector<std::string> events_;
};

}  // namespace pagoda::client
