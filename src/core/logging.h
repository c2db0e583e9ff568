#pragma once
// Logging goes through spdlog to stderr, so that stdout stays clean for generated text and JSON.
#include <spdlog/spdlog.h>

namespace pagoda {

/// Sets up the process-wide stderr logger; level is "debug", "info", "warning" or "error".
void init_logging(const std::string& level);

}  // namespace pagoda
