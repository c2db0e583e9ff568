#include "runtime/cuda/tuning_cache.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/logging.h"

namespace pagoda {
namespace {

using nlohmann::json;

/// The file's JSON, or an empty object when it is missing or unreadable (a warning for the
/// latter).
json read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return json::object();
  std::stringstream text;
  text << in.rdbuf();
  try {
    json j = json::parse(text.str());
    if (j.is_object() && j.value("version", 0) == 1 && j.contains("devices") &&
        j["devices"].is_object())
      return j;
  } catch (const json::exception&) {
  }
  spdlog::warn("{}: not a pagoda cuBLASLt tuning cache; it is ignored and will be rewritten", path);
  return json::object();
}

}  // namespace

std::vector<cuda::TunedChoice> TuningCache::load(const std::string& signature) const {
  std::vector<cuda::TunedChoice> out;
  if (path_.empty()) return out;
  const json j = read_file(path_);
  if (!j.contains("devices") || !j["devices"].contains(signature)) return out;
  try {
    for (const json& e : j["devices"][signature]) {
      cuda::TunedChoice c;
      c.m = e.at(0).get<int64_t>();
      c.n = e.at(1).get<int64_t>();
      c.k = e.at(2).get<int64_t>();
      c.dtype = e.at(3).get<int>();
      c.bias = e.at(4).get<bool>();
      c.candidate = e.at(5).get<int>();
      out.push_back(c);
    }
  } catch (const json::exception& e) {
    spdlog::warn("{}: malformed entry for {} ({}); timing afresh", path_, signature, e.what());
    return {};
  }
  return out;
}

void TuningCache::save(const std::string& signature,
                       const std::vector<cuda::TunedChoice>& choices) const {
  if (path_.empty()) return;
  namespace fs = std::filesystem;
  json j = read_file(path_);
  j["version"] = 1;
  if (!j.contains("devices")) j["devices"] = json::object();
  json entries = json::array();
  for (const cuda::TunedChoice& c : choices)
    entries.push_back({c.m, c.n, c.k, c.dtype, c.bias, c.candidate});
  j["devices"][signature] = std::move(entries);
  std::error_code ec;
  fs::create_directories(fs::path(path_).parent_path(), ec);
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << j.dump() << "\n";
    if (!out) {
      spdlog::warn("{}: cannot write the cuBLASLt tuning cache", tmp);
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path_, ec);
  if (ec) {
    spdlog::warn("{}: cannot write the cuBLASLt tuning cache: {}", path_, ec.message());
    fs::remove(tmp, ec);
  }
}

}  // namespace pagoda
