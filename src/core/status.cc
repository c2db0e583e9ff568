#include "core/status.h"

namespace pagoda::detail {

void check_failed(const char* file, int line, const char* func, const char* cond,
                  const std::string& message) {
  throw Internal(fmt::format("check failed at {}:{} in {}: {}{}{}", file, line, func, cond,
                             message.empty() ? "" : ": ", message));
}

}  // namespace pagoda::detail
