#include "cli/hub_env.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli/engine_flags.h"
#include "core/status.h"
#include "engine/speculation.h"
#include "hub/cache.h"
#include "hub/progress.h"

namespace pagoda::cli {
namespace fs = std::filesystem;
namespace {

/// The variable's value; "" when unset.
std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

/// The first of the variables that is set and not empty.
std::string first_env(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (std::string v = env(name); !v.empty()) return v;
  }
  return "";
}

/// huggingface_hub's truth: 1, ON, YES or TRUE in any case.
bool env_true(const std::string& value) {
  std::string v;
  for (char c : value) v += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

/// ~ and ~/... as the shell expands them.
std::string expand_user(const std::string& path) {
  if (path == "~" || path.starts_with("~/")) {
    const std::string home = env("HOME");
    if (home.empty()) throw InvalidArgument(fmt::format("{}: HOME is not set", path));
    return home + path.substr(1);
  }
  return path;
}

std::string trim(std::string s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && space(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && space(s[i])) ++i;
  return s.substr(i);
}

}  // namespace

hub::HubConfig hub_config_from_env(const std::string& download_dir) {
  hub::HubConfig c;
  std::string hf_home = env("HF_HOME");
  if (hf_home.empty()) {
    const std::string xdg = env("XDG_CACHE_HOME");
    hf_home = xdg.empty() ? "~/.cache/huggingface" : xdg + "/huggingface";
  }
  const std::string cache =
      !download_dir.empty() ? download_dir : first_env({"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"});
  c.cache_dir = expand_user(cache.empty() ? hf_home + "/hub" : cache);
  if (std::string endpoint = env("HF_ENDPOINT"); !endpoint.empty()) {
    while (endpoint.size() > 1 && endpoint.back() == '/') endpoint.pop_back();
    c.endpoint = endpoint;
  }
  c.offline = env_true(first_env({"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}));
  if (const std::string timeout = env("HF_HUB_DOWNLOAD_TIMEOUT"); !timeout.empty()) {
    char* end = nullptr;
    c.timeout_s = std::strtod(timeout.c_str(), &end);
    if (*end != '\0' || !(c.timeout_s > 0)) {
      throw InvalidArgument(
          fmt::format("HF_HUB_DOWNLOAD_TIMEOUT={} must be a positive number of seconds", timeout));
    }
  }
  c.token = first_env({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"});
  if (c.token.empty()) {
    std::string token_path = env("HF_TOKEN_PATH");
    if (token_path.empty()) token_path = hf_home + "/token";
    try {
      token_path = expand_user(token_path);
    } catch (const InvalidArgument&) {
      token_path.clear();  // no HOME: no token file either
    }
    std::ifstream in(token_path);
    if (in) {
      std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      c.token = trim(token);
    }
  }
  if (!env_true(env("HF_HUB_DISABLE_PROGRESS_BARS"))) {
    c.on_progress = hub::make_progress_printer(stderr, ::isatty(STDERR_FILENO) != 0);
  }
  return c;
}

std::string resolve_model_argument(const std::string& argument, const std::string& revision,
                                   bool weights, const hub::HubConfig& config) {
  std::error_code ec;
  if (fs::exists(argument, ec)) {
    if (!revision.empty()) {
      spdlog::warn("--revision {} is ignored: {} is a local directory", revision, argument);
    }
    return argument;
  }
  if (!hub::is_repo_id(argument)) return argument;
  hub::ModelRequest request;
  request.repo_id = argument;
  if (!revision.empty()) request.revision = revision;
  request.weights = weights;
  return hub::resolve_model(request, config).dir.string();
}

void resolve_model_sources(EngineArgs& args, const EngineFlags& flags) {
  std::error_code ec;
  // A draft model (speculative_config.model) given as a Hub repo id comes from the same cache.
  if (args.speculative_config && drafts_in_executor(args.speculative_config->method) &&
      !fs::exists(args.speculative_config->model, ec)) {
    try {
      args.speculative_config->model = resolve_model_argument(
          args.speculative_config->model, args.speculative_config->revision,
          args.load_format != "dummy", hub_config_from_env(flags.download_dir));
    } catch (const std::exception& e) {
      throw InvalidArgument(fmt::format("--speculative-config: model: {}", e.what()));
    }
  }
  const bool model_is_local = args.model.empty() || fs::exists(args.model, ec);
  const bool tokenizer_is_local = args.tokenizer.empty() || fs::exists(args.tokenizer, ec);
  if (model_is_local && tokenizer_is_local) {
    if (!flags.download_dir.empty()) {
      spdlog::warn("--download-dir is ignored: the model is a local directory");
    }
    if (!flags.revision.empty()) {
      spdlog::warn("--revision {} is ignored: the model is a local directory", flags.revision);
    }
    if (!flags.tokenizer_revision.empty()) {
      spdlog::warn("--tokenizer-revision {} is ignored: the tokenizer is local",
                   flags.tokenizer_revision);
    }
    return;
  }
  const hub::HubConfig config = hub_config_from_env(flags.download_dir);
  if (!args.model.empty()) {
    args.model =
        resolve_model_argument(args.model, flags.revision, args.load_format != "dummy", config);
  }
  if (!args.tokenizer.empty()) {
    args.tokenizer =
        resolve_model_argument(args.tokenizer, flags.tokenizer_revision, false, config);
  }
}

}  // namespace pagoda::cli
