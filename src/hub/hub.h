#pragma once
// Hugging Face Hub ids as model arguments (`pagoda serve org/name`), as vLLM resolves them through
// huggingface_hub:
//
// 1. The cache first. refs/{revision} names a commit (a 40-hex revision is one already); when
//    snapshots/{commit}/ holds config.json and the weights (model.safetensors, or the index and
//    every shard it lists) the snapshot is the model directory, and no request is made. With
//    `offline` (HF_HUB_OFFLINE=1) a miss is an error naming what is missing.
// 2. Otherwise the Hub's API: GET {endpoint}/api/models/{repo}/revision/{revision} gives the
//    commit (`sha`) and the file list (`siblings`). Only what pagoda reads is fetched
//    (wanted_files(): configs, tokenizer files, chat template, safetensors weights; never *.bin,
//    *.pt, GGUF, ONNX).
// 3. Per file, as hf_hub_download: HEAD {endpoint}/{repo}/resolve/{commit}/{file}, following
//    same-origin redirects, gives the blob's name (X-Linked-Etag, else ETag), its size
//    (X-Linked-Size, else Content-Length) and where its bytes are (an LFS file redirects to a
//    CDN). The GET follows every redirect (the bearer token goes to the endpoint's origin only),
//    writes blobs/{etag}.incomplete, resumes an existing one with `Range: bytes=N-` (and retries a
//    connection that drops, from where it stopped), checks the size and the digest the ETag names
//    (SHA-256 for LFS, the git blob id otherwise), renames it to blobs/{etag} and links
//    snapshots/{commit}/{file} to it. Last, refs/{revision} is written.
//
// Nothing here reads the environment: the command line builds the HubConfig (cli/hub_env.h).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace pagoda::hub {

/// One file's download, as the progress callback sees it.
struct DownloadProgress {
  std::string filename;
  uint64_t bytes = 0;             // in the cache so far, a resumed part included
  std::optional<uint64_t> total;  // nullopt when the server did not say
  uint64_t resumed_from = 0;      // bytes that were already there when this run started
  double elapsed_s = 0;           // since this run started on the file
  bool done = false;
};

using ProgressCallback = std::function<void(const DownloadProgress&)>;

struct HubConfig {
  std::filesystem::path cache_dir;                  // the hub cache (HF_HUB_CACHE)
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT
  std::string token;                                // HF_TOKEN, sent as `Authorization: Bearer`
  bool offline = false;                             // HF_HUB_OFFLINE: the cache only
  std::string ca_file;                              // "" = the system's certificate store
  double timeout_s = 60;                            // longest silence of a connection
  int max_retries = 5;                              // failed attempts in a row on one file
  double retry_delay_s = 0.5;                       // before the first retry; doubles, up to 8 s
  ProgressCallback on_progress;                     // none: silent
};

struct ModelRequest {
  std::string repo_id;            // "org/name" or "name"
  std::string revision = "main";  // branch, tag or commit hash
  bool weights = true;            // false: configs and tokenizer only (--load-format dummy)
};

struct ResolvedModel {
  std::filesystem::path dir;  // snapshots/{commit}
  std::string commit;
  int files_downloaded = 0;  // 0 when the cache had everything
};

/// The files of a repository (its `siblings`) that pagoda reads, in download order: the small
/// ones, then model.safetensors.index.json, then model.safetensors (the shards come from the
/// index once it is here). Throws NotFound when `weights` and the repository has no safetensors
/// weights pagoda can load, naming what it has instead.
[[nodiscard]] std::vector<std::string> wanted_files(const std::vector<std::string>& siblings,
                                                    bool weights, const std::string& repo_id);

/// What the snapshot lacks for a model directory: config.json, and with `weights` the weights
/// (the index's shards when there is an index). Empty when complete.
[[nodiscard]] std::vector<std::string> missing_files(const std::filesystem::path& snapshot,
                                                     bool weights);

/// The local model directory of `request`, from the cache or downloaded into it (see above).
/// Throws InvalidArgument (bad id or revision, 401, 403), NotFound (404, offline miss) or
/// Unavailable (network failures, server errors), each naming the repository.
[[nodiscard]] ResolvedModel resolve_model(const ModelRequest& request, const HubConfig& config);

}  // namespace pagoda::hub
