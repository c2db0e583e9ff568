#include "router/kv_return.h"

#include <nlohmann/json.hpp>

namespace pagoda::router {
namespace {

using Json = nlohmann::json;

std::optional<std::string> params_of(std::string_view text) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto it = j.find("kv_transfer_params");
  if (it == j.end() || !it->is_object()) return std::nullopt;
  return it->dump();
}

}  // namespace

void KVReturnScanner::feed_body(std::string_view body) {
  if (std::optional<std::string> p = params_of(body)) params_ = std::move(p);
}

void KVReturnScanner::feed_stream(std::string_view bytes) {
  pending_.append(bytes);
  // Example: pending "data: {..}\n\ndata: {.." scans the first event and keeps "data: {..".
  size_t start = 0;
  for (size_t end; (end = pending_.find("\n\n", start)) != std::string::npos; start = end + 2) {
    scan_event(std::string_view(pending_).substr(start, end - start));
  }
  pending_.erase(0, start);
}

void KVReturnScanner::scan_event(std::string_view event) {
  if (event.find("\"kv_transfer_params\"") == std::string_view::npos) return;
  size_t line_start = 0;
  while (line_start <= event.size()) {
    size_t line_end = event.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = event.size();
    std::string_view line = event.substr(line_start, line_end - line_start);
    if (line.starts_with("data:")) {
      line.remove_prefix(5);
      if (std::optional<std::string> p = params_of(line)) params_ = std::move(p);
    }
    line_start = line_end + 1;
  }
}

std::string kv_import_body(const std::string& params, const std::string& cache_salt) {
  Json body = Json::object();
  body["kv_transfer_params"] = Json::parse(params);
  if (!cache_salt.empty()) body["cache_salt"] = cache_salt;
  return body.dump();
}

}  // namespace pagoda::router
