#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace pagoda {

void init_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("pagoda");
  logger->set_pattern("%^%L%$ %H:%M:%S.%e %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(level == "warning" ? spdlog::level::warn : spdlog::level::from_str(level));
}

}  // namespace pagoda
