#include "tokenizer/pattern.h"

#include "core/status.h"

namespace pagoda {

Pattern::Pattern(const tokenizer_json::Json& j, const std::string& file, const std::string& where) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    literal_ = j["String"].get<std::string>();
    if (literal_.empty()) tokenizer_json::fail(file, where + ".String must not be empty");
  } else if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    regex_ = std::make_unique<Regex>(j["Regex"].get<std::string>(), file + ": " + where);
  } else {
    tokenizer_json::fail(file, where + " must be {\"String\": ...} or {\"Regex\": ...}");
  }
}

void Pattern::find_all(std::string_view text,
                       std::vector<std::pair<size_t, size_t>>& matches) const {
  if (regex_) {
    regex_->find_all(text, matches);
    return;
  }
  size_t pos = 0;
  while ((pos = text.find(literal_, pos)) != std::string_view::npos) {
    matches.emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<std::pair<size_t, size_t>> matches;
  find_all(text, matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t last = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.substr(last, begin - last));
    out.append(content);
    last = end;
  }
  out.append(text.substr(last));
  return out;
}

}  // namespace pagoda
