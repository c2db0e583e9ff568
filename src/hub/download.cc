#include "hub/download.h"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "core/status.h"
#include "hub/checksum.h"

namespace pagoda::hub {
namespace fs = std::filesystem;
namespace {

constexpr int kMaxRedirects = 10;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool is_redirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

std::optional<uint64_t> parse_size(const std::string& text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

/// The start of a `Content-Range: bytes START-END/TOTAL` header, nullopt when malformed.
std::optional<uint64_t> content_range_start(const std::string& value) {
  if (!value.starts_with("bytes ")) return std::nullopt;
  const size_t dash = value.find('-', 6);
  if (dash == std::string::npos) return std::nullopt;
  return parse_size(value.substr(6, dash - 6));
}

/// What the request was about, for error messages.
struct Context {
  std::string repo_id;
  std::string revision;
  std::string filename;  // "" for the revision API
  std::string endpoint;
  bool has_token = false;
};

/// Throws the error a non-success status means, as huggingface_hub's hf_raise_for_status words
/// it: the Hub's X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo) and
/// X-Error-Message refine the status.
[[noreturn]] void raise_for_status(const HttpResponse& r, const Context& c) {
  const std::string code = r.header("x-error-code");
  std::string detail = r.header("x-error-message");
  if (detail.empty() && !r.body.empty() && r.body.size() < 500) {
    try {
      const auto j = nlohmann::json::parse(r.body);
      if (j.is_object() && j.contains("error") && j["error"].is_string()) detail = j["error"];
    } catch (const nlohmann::json::exception&) {
    }
  }
  const std::string suffix = detail.empty() ? "" : fmt::format(" (the Hub says: {})", detail);
  const std::string where =
      c.filename.empty()
          ? fmt::format("{} at revision {}", c.repo_id, c.revision)
          : fmt::format("{} of {} at revision {}", c.filename, c.repo_id, c.revision);
  if (r.status == 401) {
    throw InvalidArgument(
        c.has_token
            ? fmt::format("{}: 401 Unauthorized from {}: the token (HF_TOKEN or $HF_HOME/token) "
                          "is not valid or cannot read this repository{}",
                          where, c.endpoint, suffix)
            : fmt::format("{}: 401 Unauthorized from {}: the repository is private or gated, or "
                          "does not exist (nor is there a local directory of that name); set "
                          "HF_TOKEN to a token that can read it (or run `huggingface-cli login`){}",
                          where, c.endpoint, suffix));
  }
  if (r.status == 403 || code == "GatedRepo") {
    throw InvalidArgument(fmt::format(
        "{}: 403 Forbidden from {}: access is restricted (a gated model whose conditions the "
        "account of HF_TOKEN has not accepted, or a token without read access); ask for access "
        "at {}/{}{}",
        where, c.endpoint, c.endpoint, c.repo_id, suffix));
  }
  if (r.status == 404) {
    if (code == "RevisionNotFound") {
      throw NotFound(fmt::format("revision '{}' not found in {} at {}{}", c.revision, c.repo_id,
                                 c.endpoint, suffix));
    }
    if (code == "EntryNotFound" || (!c.filename.empty() && code != "RepoNotFound")) {
      throw NotFound(fmt::format("{}: not found at {}{}", where, c.endpoint, suffix));
    }
    throw NotFound(fmt::format(
        "model {} not found: no local directory of that name, and no repository {} (revision "
        "{}) at {}{}",
        c.repo_id, c.repo_id, c.revision, c.endpoint, suffix));
  }
  const std::string message =
      fmt::format("{}: HTTP {} from {}{}", where, r.status, c.endpoint, suffix);
  if (r.status >= 500 || r.status == 429) throw Unavailable(message);
  throw InvalidArgument(message);
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

std::string normalize_etag(std::string_view etag) {
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return std::string(etag);
}

Downloader::Downloader(const HubConfig& config, const RepoCache& cache, std::string repo_id)
    : config_(config),
      cache_(cache),
      repo_id_(std::move(repo_id)),
      endpoint_(parse_url(config.endpoint, "HF_ENDPOINT")),
      http_(HttpOptions{.connect_timeout_s = std::min(config.timeout_s, 30.0),
                        .read_timeout_s = config.timeout_s,
                        .ca_file = config.ca_file,
                        .user_agent = "pagoda/0.1 (huggingface_hub compatible)"}) {
  while (endpoint_.target.size() > 1 && endpoint_.target.back() == '/') endpoint_.target.pop_back();
  if (endpoint_.target == "/") endpoint_.target.clear();
}

Headers Downloader::auth_headers(const Url& url) const {
  if (config_.token.empty() || url.origin() != endpoint_.origin()) return {};
  return {{"Authorization", "Bearer " + config_.token}};
}

RevisionInfo Downloader::revision_info(const std::string& revision) {
  Url url = endpoint_;
  url.target +=
      fmt::format("/api/models/{}/revision/{}", repo_id_, percent_encode(revision, false));
  const Context context{repo_id_, revision, "", endpoint_.origin() + endpoint_.target,
                        !config_.token.empty()};
  HttpResponse r;
  for (int hop = 0;; ++hop) {
    r = http_.request("GET", url, auth_headers(url));
    if (!is_redirect(r.status) || r.header("location").empty() || hop == kMaxRedirects) break;
    url = resolve_location(url, r.header("location"));  // a renamed repository
  }
  if (r.status != 200) raise_for_status(r, context);
  RevisionInfo info;
  try {
    const auto j = nlohmann::json::parse(r.body);
    info.commit = j.at("sha").get<std::string>();
    for (const auto& sibling : j.at("siblings")) {
      info.files.push_back(sibling.at("rfilename").get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw Unavailable(fmt::format("{}: the answer of {} is not the Hub's revision JSON ({})",
                                  repo_id_, url.str(), e.what()));
  }
  if (!is_commit_hash(info.commit)) {
    throw Unavailable(fmt::format("{}: {} gave '{}' as the commit, not a 40-hex hash", repo_id_,
                                  url.str(), info.commit));
  }
  return info;
}

FileMetadata Downloader::metadata(const std::string& commit, const std::string& filename) {
  Url url = endpoint_;
  url.target += fmt::format("/{}/resolve/{}/{}", repo_id_, commit, percent_encode(filename, true));
  const Context context{repo_id_, commit, filename, endpoint_.origin() + endpoint_.target,
                        !config_.token.empty()};
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    const HttpResponse r = http_.request("HEAD", url, auth_headers(url));
    const bool redirect = is_redirect(r.status) && !r.header("location").empty();
    const Url next = redirect ? resolve_location(url, r.header("location")) : url;
    // Same-origin redirects (a renamed repository, the Hub's resolve-cache) are followed for
    // the metadata; one to another origin is where the bytes are (an LFS file's CDN).
    if (redirect && next.origin() == url.origin()) {
      url = next;
      continue;
    }
    if (!redirect && r.status != 200) raise_for_status(r, context);
    FileMetadata meta;
    meta.etag = normalize_etag(!r.header("x-linked-etag").empty() ? r.header("x-linked-etag")
                                                                  : r.header("etag"));
    meta.commit = r.header("x-repo-commit");
    // A redirect's own Content-Length is its body's, not the file's: only X-Linked-Size counts.
    meta.size = parse_size(!r.header("x-linked-size").empty() ? r.header("x-linked-size")
                           : redirect                         ? std::string()
                                                              : r.header("content-length"));
    meta.location = next;
    if (meta.etag.empty() || meta.etag.find('/') != std::string::npos || meta.etag == "." ||
        meta.etag == "..") {
      throw Unavailable(
          fmt::format("{} of {}: {} sent no usable ETag (is HF_ENDPOINT a Hugging "
                      "Face Hub?)",
                      filename, repo_id_, url.str()));
    }
    return meta;
  }
  throw Unavailable(
      fmt::format("{} of {}: more than {} redirects", filename, repo_id_, kMaxRedirects));
}

void Downloader::fetch(const std::string& commit, const std::string& filename) {
  const FileMetadata meta = metadata(commit, filename);
  if (!meta.commit.empty() && meta.commit != commit) {
    spdlog::warn("{} of {}: the Hub resolved commit {} to {}", filename, repo_id_, commit,
                 meta.commit);
  }
  std::error_code ec;
  if (!fs::is_regular_file(cache_.blob_path(meta.etag), ec)) download_blob(filename, meta);
  cache_.link(commit, filename, meta.etag);
}

struct Downloader::Transfer {
  std::string filename;
  const FileMetadata* meta = nullptr;
  fs::path partial;
  uint64_t offset = 0;
  uint64_t resumed_from = 0;
  std::unique_ptr<ContentHasher> hash;
  Clock::time_point started;
  Clock::time_point last_report;
};

void Downloader::download_blob(const std::string& filename, const FileMetadata& meta) {
  const fs::path blob = cache_.blob_path(meta.etag);
  fs::create_directories(blob.parent_path());
  // Another process (pagoda or huggingface_hub) may be writing the same blob: wait for it.
  FileLock lock(cache_.lock_path(meta.etag));
  std::error_code ec;
  if (fs::is_regular_file(blob, ec)) return;
  Transfer t;
  t.filename = filename;
  t.meta = &meta;
  t.partial = blob.string() + ".incomplete";
  t.hash = std::make_unique<ContentHasher>(meta.etag, meta.size);
  t.started = t.last_report = Clock::now();
  if (fs::exists(t.partial, ec)) {
    t.offset = fs::file_size(t.partial);
    if (meta.size && t.offset > *meta.size) {
      fs::resize_file(t.partial, 0);
      t.offset = 0;
    }
    // The digest covers the whole file: read in what an earlier run left.
    std::unique_ptr<std::FILE, FileCloser> in(std::fopen(t.partial.c_str(), "rb"));
    std::vector<char> buffer(1 << 20);
    uint64_t left = t.offset;
    while (in && left > 0) {
      const size_t n =
          std::fread(buffer.data(), 1, std::min<uint64_t>(left, buffer.size()), in.get());
      if (n == 0) break;
      t.hash->update(buffer.data(), n);
      left -= n;
    }
    t.resumed_from = t.offset;
    if (t.offset > 0) {
      spdlog::info("{} of {}: resuming at {} bytes", filename, repo_id_, t.offset);
    }
  }
  int failures = 0;
  while (!meta.size || t.offset < *meta.size) {
    const uint64_t before = t.offset;
    try {
      attempt(t);
      break;
    } catch (const NetworkError& e) {
      failures = t.offset > before ? 1 : failures + 1;
      if (failures > config_.max_retries) {
        throw NetworkError(fmt::format("{} of {}: {} ({} bytes kept in {}; run again to resume)",
                                       filename, repo_id_, e.what(), t.offset, t.partial.string()));
      }
      const double delay = std::min(8.0, config_.retry_delay_s * (1 << (failures - 1)));
      spdlog::warn("{} of {}: {}; retrying from byte {} in {:.1f} s", filename, repo_id_, e.what(),
                   t.offset, delay);
      std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    }
  }
  if (meta.size && t.offset != *meta.size) {
    throw Unavailable(fmt::format("{} of {}: got {} bytes, the Hub announced {}", filename,
                                  repo_id_, t.offset, *meta.size));
  }
  if (t.hash->enabled()) {
    const std::string digest = t.hash->hex();
    if (digest != meta.etag) {
      fs::remove(t.partial, ec);
      throw Unavailable(
          fmt::format("{} of {}: the download's digest {} is not its ETag {}; the "
                      "partial file was removed, run again",
                      filename, repo_id_, digest, meta.etag));
    }
  }
  fs::rename(t.partial, blob);
  if (config_.on_progress) {
    config_.on_progress(DownloadProgress{filename, t.offset, meta.size, t.resumed_from,
                                         seconds_since(t.started), true});
  }
}

void Downloader::attempt(Transfer& t) {
  const Context context{repo_id_, "", t.filename, endpoint_.origin() + endpoint_.target,
                        !config_.token.empty()};
  Url url = t.meta->location;
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    Headers headers = auth_headers(url);
    if (t.offset > 0) headers.emplace_back("Range", fmt::format("bytes={}-", t.offset));
    std::optional<Url> next;
    bool restart = false;
    std::unique_ptr<std::FILE, FileCloser> out;
    http_.stream(
        url, headers,
        [&](const HttpResponse& r) {
          if (is_redirect(r.status) && !r.header("location").empty()) {
            next = resolve_location(url, r.header("location"));
            return false;
          }
          if (r.status == 416 && t.offset > 0) {  // the range starts at or past the end
            restart = true;
            return false;
          }
          if (r.status != 200 && r.status != 206) raise_for_status(r, context);
          const std::string encoding = r.header("content-encoding");
          if (!encoding.empty() && encoding != "identity") {
            throw Unavailable(fmt::format("{}: {} sent it with Content-Encoding {}", t.filename,
                                          url.str(), encoding));
          }
          if (r.status == 206) {
            const auto start = content_range_start(r.header("content-range"));
            if (!start || *start != t.offset) {
              throw Unavailable(fmt::format("{}: {} answered the range from {} with '{}'",
                                            t.filename, url.str(), t.offset,
                                            r.header("content-range")));
            }
          } else if (t.offset > 0) {  // the whole file again: start over
            spdlog::info("{}: {} does not resume; downloading from the start", t.filename,
                         url.origin());
            t.offset = 0;
            t.hash = std::make_unique<ContentHasher>(t.meta->etag, t.meta->size);
          }
          out.reset(std::fopen(t.partial.c_str(), t.offset > 0 ? "ab" : "wb"));
          if (!out) throw Error(fmt::format("cannot write {}", t.partial.string()));
          return true;
        },
        [&](const char* data, size_t n) {
          if (std::fwrite(data, 1, n, out.get()) != n) {
            throw Error(fmt::format("cannot write {} (disk full?)", t.partial.string()));
          }
          t.hash->update(data, n);
          t.offset += n;
          if (config_.on_progress &&
              Clock::now() - t.last_report > std::chrono::milliseconds(100)) {
            t.last_report = Clock::now();
            config_.on_progress(DownloadProgress{t.filename, t.offset, t.meta->size, t.resumed_from,
                                                 seconds_since(t.started), false});
          }
        });
    if (out && std::fflush(out.get()) != 0) {
      throw Error(fmt::format("cannot write {} (disk full?)", t.partial.string()));
    }
    if (restart) {
      if (t.meta->size && t.offset == *t.meta->size) return;  // it was complete
      fs::resize_file(t.partial, 0);
      t.offset = 0;
      t.hash = std::make_unique<ContentHasher>(t.meta->etag, t.meta->size);
      hop = -1;
      url = t.meta->location;
      continue;
    }
    if (!next) return;
    url = *next;
  }
  throw Unavailable(
      fmt::format("{} of {}: more than {} redirects", t.filename, repo_id_, kMaxRedirects));
}

}  // namespace pagoda::hub
