#pragma once
// Exact-path routing: a path with no route is 404, a path routed for other methods is 405.
#include <map>
#include <string>
#include <string_view>

#include "server/http/http_types.h"

namespace pagoda::http {

/// Maps (method, path) to handlers; read-only once the server runs, so lookups need no lock.
class Router {
 public:
  /// Adds or replaces the handler of `method` (e.g. "POST") on `path` (e.g. "/v1/completions").
  void add(std::string method, std::string path, Handler handler);

  /// What a lookup found: a handler, or the status (404/405) and, for 405, the Allow value.
  struct Match {
    const Handler* handler = nullptr;
    int status = 200;
    std::string allow;
  };
  [[nodiscard]] Match find(std::string_view method, std::string_view path) const;

 private:
  // path -> method -> handler; std::less<> allows string_view lookups.
  std::map<std::string, std::map<std::string, Handler, std::less<>>, std::less<>> routes_;
};

}  // namespace pagoda::http
