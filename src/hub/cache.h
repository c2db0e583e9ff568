#pragma once
// The Hugging Face cache layout that huggingface_hub, transformers and vLLM share:
//   {cache}/models--{org}--{name}/refs/{revision}        a text file: the commit hash
//   {cache}/models--{org}--{name}/snapshots/{commit}/{f}  a relative symlink to ../../blobs/{etag}
//   {cache}/models--{org}--{name}/blobs/{etag}            the content ({etag}.incomplete while
//                                                         downloading)
//   {cache}/.locks/models--{org}--{name}/{etag}.lock      flock(2) while a blob is written
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace pagoda::hub {

/// Whether `text` has the shape of a Hub repo id: `name` or `org/name`, each part of letters,
/// digits, '-', '_' and '.', not starting or ending with '-' or '.', without "--" or "..", at
/// most 96 characters (huggingface_hub's rules).
[[nodiscard]] bool is_repo_id(std::string_view text);

/// A full commit hash: 40 lower-case hex digits.
[[nodiscard]] bool is_commit_hash(std::string_view text);

/// Throws InvalidArgument unless `revision` is a branch, tag or commit name that is safe as a
/// path under refs/ (no empty, "." or ".." segment, no leading '/').
void check_revision(std::string_view revision);

/// "models--org--name" for "org/name".
[[nodiscard]] std::string repo_folder_name(std::string_view repo_id);

/// One repository's folder in the cache.
class RepoCache {
 public:
  RepoCache(const std::filesystem::path& cache_dir, std::string_view repo_id);

  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }
  [[nodiscard]] std::filesystem::path snapshot_dir(std::string_view commit) const;
  [[nodiscard]] std::filesystem::path blob_path(std::string_view etag) const;
  [[nodiscard]] std::filesystem::path lock_path(std::string_view etag) const;

  /// The commit that refs/{revision} names, or nullopt when there is no such ref.
  [[nodiscard]] std::optional<std::string> read_ref(std::string_view revision) const;
  /// Points refs/{revision} at `commit` (written to a temporary file, then renamed).
  void write_ref(std::string_view revision, std::string_view commit) const;
  /// snapshots/{commit}/{filename} -> ../../blobs/{etag}, replacing what was there.
  void link(std::string_view commit, std::string_view filename, std::string_view etag) const;

 private:
  std::filesystem::path root_;
  std::filesystem::path dir_;
  std::string folder_;
};

/// An exclusive flock(2) on a lock file (the one huggingface_hub's FileLock takes), held for
/// the object's life; the constructor waits for another process that holds it.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace pagoda::hub
