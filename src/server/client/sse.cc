#include "server/client/sse.h"

namespace pagoda::client {

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      end_line();
    } else {
      line_ += c;
    }
  }
  std::vector<std::string> out;
  out.swap(events_);
  return out;
}

void SseParser::end_line() {
  if (line_.empty()) {  // a blank line dispatches the event
    if (has_data_) events_.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  std::string_view line = line_;
  if (line.front() != ':') {  // ':' starts a comment (keep-alives)
    const size_t colon = line.find(':');
    std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_ += value;
      has_data_ = true;
    }
  }
  line_.clear();
}

}  // namespace pagoda::client
