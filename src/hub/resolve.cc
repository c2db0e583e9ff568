// Resolution of a repo id to a snapshot directory: the cache, then the Hub (see hub.h).
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include "core/status.h"
#include "hub/cache.h"
#include "hub/download.h"
#include "hub/hub.h"

namespace pagoda::hub {
namespace fs = std::filesystem;
namespace {

constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kSingle = "model.safetensors";

// What pagoda reads beside the weights: model/config.cc (config.json, generation_config.json,
// the quantization side files), tokenizer/ (tokenizer.json, tokenizer_config.json,
// chat_template.jinja), and what transformers keeps next to them.
constexpr const char* kSmallFiles[] = {
    "config.json",           "generation_config.json",  "tokenizer.json",
    "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
    "chat_template.json",    "quantize_config.json",    "quant_config.json",
    "hf_quant_config.json",
};

bool ends_with_any(const std::string& name, std::initializer_list<const char*> suffixes) {
  return std::any_of(suffixes.begin(), suffixes.end(),
                     [&](const char* s) { return name.ends_with(s); });
}

/// The shard names of an index file; throws when it is not an index.
std::vector<std::string> index_shards(const fs::path& index) {
  std::ifstream in(index);
  std::stringstream text;
  text << in.rdbuf();
  std::set<std::string> shards;
  try {
    const auto j = nlohmann::json::parse(text.str());
    for (const auto& [name, file] : j.at("weight_map").items()) {
      shards.insert(file.get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(
        fmt::format("{}: not a safetensors index ({})", index.string(), e.what()));
  }
  return {shards.begin(), shards.end()};
}

bool present(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);  // through the link: a dangling one is absent
}

/// The Hub part of resolve_model: the revision API, then every file the cache lacks.
ResolvedModel download_model(const ModelRequest& request, const HubConfig& config,
                             const RepoCache& cache) {
  const std::string& repo = request.repo_id;
  const auto start = std::chrono::steady_clock::now();
  Downloader downloader(config, cache, repo);
  const RevisionInfo info = downloader.revision_info(request.revision);
  const std::vector<std::string> files = wanted_files(info.files, request.weights, repo);
  const fs::path snapshot = cache.snapshot_dir(info.commit);
  spdlog::info("{} (revision {}): commit {}, into the Hugging Face cache {}", repo,
               request.revision, info.commit, cache.dir().string());
  int fetched = 0;
  const auto fetch = [&](const std::string& name) {
    if (present(snapshot / name)) return;
    downloader.fetch(info.commit, name);
    ++fetched;
  };
  for (const std::string& name : files) fetch(name);
  if (request.weights && present(snapshot / kIndex)) {
    const std::set<std::string> have(info.files.begin(), info.files.end());
    for (const std::string& shard : index_shards(snapshot / kIndex)) {
      if (shard.find('/') != std::string::npos || !have.count(shard)) {
        throw NotFound(
            fmt::format("{}: model.safetensors.index.json names {}, which the "
                        "repository does not have at commit {}",
                        repo, shard, info.commit));
      }
      fetch(shard);
    }
  }
  if (request.revision != info.commit) cache.write_ref(request.revision, info.commit);
  const std::vector<std::string> missing = missing_files(snapshot, request.weights);
  if (!missing.empty()) {
    throw Unavailable(
        fmt::format("{}: still missing after the download: {}", repo, fmt::join(missing, ", ")));
  }
  if (fetched > 0) {
    spdlog::info("{}: {} files downloaded in {:.1f} s", repo, fetched,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return {snapshot, info.commit, fetched};
}

}  // namespace

std::vector<std::string> wanted_files(const std::vector<std::string>& siblings, bool weights,
                                      const std::string& repo_id) {
  const std::set<std::string> have(siblings.begin(), siblings.end());
  if (!have.count("config.json")) {
    throw NotFound(
        fmt::format("{} has no config.json: not a transformers model repository", repo_id));
  }
  std::vector<std::string> out;
  for (const char* name : kSmallFiles) {
    if (have.count(name)) out.emplace_back(name);
  }
  if (!weights) return out;
  if (have.count(kIndex)) {
    out.emplace_back(kIndex);
  } else if (have.count(kSingle)) {
    out.emplace_back(kSingle);
  } else {
    std::vector<std::string> other;
    for (const std::string& f : siblings) {
      if (ends_with_any(f, {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".onnx", ".h5",
                            ".msgpack", ".ckpt"})) {
        other.push_back(f);
      }
    }
    throw NotFound(fmt::format(
        "{} has no model.safetensors or model.safetensors.index.json: pagoda loads safetensors "
        "checkpoints in the transformers layout{}",
        repo_id,
        other.empty() ? std::string(" (it has no weights at all)")
                      : fmt::format(" (it has: {})", fmt::join(other, ", "))));
  }
  return out;
}

std::vector<std::string> missing_files(const fs::path& snapshot, bool weights) {
  std::vector<std::string> missing;
  if (!present(snapshot / "config.json")) missing.emplace_back("config.json");
  if (!weights) return missing;
  if (present(snapshot / kIndex)) {
    try {
      for (const std::string& shard : index_shards(snapshot / kIndex)) {
        if (!present(snapshot / shard)) missing.push_back(shard);
      }
    } catch (const InvalidArgument&) {
      missing.emplace_back(kIndex);
    }
  } else if (!present(snapshot / kSingle)) {
    missing.emplace_back("model.safetensors (or model.safetensors.index.json)");
  }
  return missing;
}

ResolvedModel resolve_model(const ModelRequest& request, const HubConfig& config) {
  const std::string& repo = request.repo_id;
  if (!is_repo_id(repo)) {
    throw InvalidArgument(fmt::format(
        "'{}' is neither a local directory nor a Hugging Face repo id (org/name)", repo));
  }
  check_revision(request.revision);
  if (config.cache_dir.empty()) throw InvalidArgument("no Hugging Face cache directory is set");
  const RepoCache cache(config.cache_dir, repo);
  const std::optional<std::string> cached_commit = is_commit_hash(request.revision)
                                                       ? std::optional(request.revision)
                                                       : cache.read_ref(request.revision);
  std::vector<std::string> missing;
  if (cached_commit) {
    const fs::path snapshot = cache.snapshot_dir(*cached_commit);
    missing = missing_files(snapshot, request.weights);
    if (missing.empty()) {
      spdlog::info("{} (revision {}): commit {} from the Hugging Face cache {}", repo,
                   request.revision, *cached_commit, cache.dir().string());
      return {snapshot, *cached_commit, 0};
    }
  }
  if (config.offline) {
    if (cached_commit) {
      throw NotFound(fmt::format(
          "{} (revision {}, commit {}) is incomplete in the Hugging Face cache {}: {} missing, "
          "and HF_HUB_OFFLINE is set (unset it to download the rest)",
          repo, request.revision, *cached_commit, cache.dir().string(), fmt::join(missing, ", ")));
    }
    throw NotFound(fmt::format(
        "{} (revision {}) is not in the Hugging Face cache {} (no {}), and HF_HUB_OFFLINE is "
        "set: unset it to download the model, or give a local directory",
        repo, request.revision, config.cache_dir.string(),
        (cache.dir() / "refs" / request.revision).string()));
  }

  try {
    return download_model(request, config, cache);
  } catch (const NetworkError& e) {
    throw NetworkError(fmt::format(
        "{}: {}; the model is not (completely) in the Hugging Face cache {}: check the network, "
        "HF_ENDPOINT, or a proxy",
        repo, e.what(), cache.dir().string()));
  }
}

}  // namespace pagoda::hub
