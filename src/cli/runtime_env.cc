#include "cli/runtime_env.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "core/status.h"

namespace pagoda {

bool env_flag(const char* name, bool fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  return std::string_view(value) != "0";
}

int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  if (*end != '\0' || parsed < lo || parsed > hi) {
    throw InvalidArgument(fmt::format("{}={} must be an integer in [{}, {}]", name, value, lo, hi));
  }
  return parsed;
}

RuntimeOptions runtime_options_from_env(RuntimeOptions o) {
  o.cuda_graphs = o.cuda_graphs && !env_flag("PAGODA_ENFORCE_EAGER", false);
  o.cublaslt_tuning = env_flag("PAGODA_CUBLASLT_TUNING", o.cublaslt_tuning);
  o.device_sampling = !env_flag("PAGODA_HOST_SAMPLING", !o.device_sampling);
  o.chained_drafts = !env_flag("PAGODA_UNCHAINED_DRAFTS", !o.chained_drafts);
  o.gemv_fusion = !env_flag("PAGODA_DISABLE_GEMV_FUSION", !o.gemv_fusion);
  o.gemv_mma_max_m = static_cast<int>(env_int("PAGODA_GEMV_MMA_MAX_M", o.gemv_mma_max_m, 0, 16));
  o.gemv_mma_rows = static_cast<int>(env_int("PAGODA_GEMV_MMA_ROWS", o.gemv_mma_rows, 1, 4));
  o.gemv_mma_steps = static_cast<int>(env_int("PAGODA_GEMV_MMA_STEPS", o.gemv_mma_steps, 1, 4));
  o.attention_min_split_keys = static_cast<int>(
      env_int("PAGODA_ATTENTION_MIN_SPLIT_KEYS", o.attention_min_split_keys, 64, 1 << 20));
  o.dependent_launch = env_flag("PAGODA_PDL", o.dependent_launch);
  o.hopper_attention = !env_flag("PAGODA_DISABLE_HOPPER_ATTENTION", !o.hopper_attention);
  if (const char* cache = std::getenv("PAGODA_CUBLASLT_TUNING_CACHE");
      cache != nullptr && *cache != '\0') {
    o.cublaslt_tuning_cache = std::string_view(cache) == "0" ? "" : cache;
  } else if (o.cublaslt_tuning_cache.empty()) {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    if (xdg != nullptr && *xdg != '\0') {
      o.cublaslt_tuning_cache = std::string(xdg) + "/pagoda/cublaslt-tuning.json";
    } else if (home != nullptr && *home != '\0') {
      o.cublaslt_tuning_cache = std::string(home) + "/.cache/pagoda/cublaslt-tuning.json";
    }
  }
  o.load_pinned = env_flag("PAGODA_LOAD_PINNED", o.load_pinned);
  o.load_buffers = static_cast<int>(env_int("PAGODA_LOAD_BUFFERS", o.load_buffers, 1, 256));
  o.load_buffer_mib =
      static_cast<int>(env_int("PAGODA_LOAD_BUFFER_MIB", o.load_buffer_mib, 1, 1024));
  return o;
}

}  // namespace pagoda
