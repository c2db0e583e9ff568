#include "server/http/router.h"

#include <utility>

namespace pagoda::http {

void Router::add(std::string method, std::string path, Handler handler) {
  routes_[std::move(path)][std::move(method)] = std::move(handler);
}

Router::Match Router::find(std::string_view method, std::string_view path) const {
  Match match;
  auto by_path = routes_.find(path);
  if (by_path == routes_.end()) {
    match.status = 404;
    return match;
  }
  auto by_method = by_path->second.find(method);
  if (by_method == by_path->second.end()) {
    match.status = 405;
    for (const auto& [m, handler] : by_path->second) {
      if (!match.allow.empty()) match.allow += ", ";
      match.allow += m;
    }
    return match;
  }
  match.handler = &by_method->second;
  return match;
}

}  // namespace pagoda::http
