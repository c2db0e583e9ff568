#pragma once
// The Hub's HTTP side for one repository: the revision API, a file's metadata (HEAD on resolve/)
// and the resumable download of its blob into the cache. resolve.cc decides what to fetch.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hub/cache.h"
#include "hub/http_client.h"
#include "hub/hub.h"
#include "hub/url.h"

namespace pagoda::hub {

/// GET api/models/{repo}/revision/{revision}: the commit and the file names.
struct RevisionInfo {
  std::string commit;
  std::vector<std::string> files;
};

/// What HEAD resolve/{commit}/{file} says about a file.
struct FileMetadata {
  std::string etag;              // normalized: no W/ prefix, no quotes
  std::string commit;            // X-Repo-Commit, "" when absent
  std::optional<uint64_t> size;  // X-Linked-Size, else Content-Length
  Url location;                  // where the bytes are (the CDN for an LFS file)
};

class Downloader {
 public:
  Downloader(const HubConfig& config, const RepoCache& cache, std::string repo_id);

  [[nodiscard]] RevisionInfo revision_info(const std::string& revision);
  [[nodiscard]] FileMetadata metadata(const std::string& commit, const std::string& filename);
  /// Makes snapshots/{commit}/{filename} a link to its complete, checked blob, downloading (or
  /// resuming) the blob unless it is already in blobs/.
  void fetch(const std::string& commit, const std::string& filename);

 private:
  /// Authorization for `url` when it is on the endpoint's origin and a token is set.
  [[nodiscard]] Headers auth_headers(const Url& url) const;
  /// Downloads `meta`'s bytes into blobs/{etag} (under the blob's lock).
  void download_blob(const std::string& filename, const FileMetadata& meta);
  struct Transfer;
  /// One attempt: GET from the transfer's offset following redirects, appending to its
  /// .incomplete file. Throws NetworkError when the connection fails.
  void attempt(Transfer& t);

  const HubConfig& config_;
  const RepoCache& cache_;
  std::string repo_id_;
  Url endpoint_;
  HttpClient http_;
};

/// The ETag as huggingface_hub normalizes it: without a weak "W/" prefix and surrounding quotes.
[[nodiscard]] std::string normalize_etag(std::string_view etag);

}  // namespace pagoda::hub
