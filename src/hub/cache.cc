#include "hub/cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/status.h"

namespace pagoda::hub {
namespace fs = std::filesystem;

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

bool is_name(std::string_view part) {
  if (part.empty()) return false;
  for (char c : part) {
    if (!is_name_char(c)) return false;
  }
  const char first = part.front(), last = part.back();
  return first != '-' && first != '.' && last != '-' && last != '.';
}

[[noreturn]] void fail_io(const std::string& what, const fs::path& path) {
  throw Error(fmt::format("{} {}: {}", what, path.string(), std::strerror(errno)));
}

}  // namespace

bool is_repo_id(std::string_view text) {
  if (text.empty() || text.size() > 96) return false;
  if (text.find("--") != std::string_view::npos || text.find("..") != std::string_view::npos) {
    return false;
  }
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) return is_name(text);
  return is_name(text.substr(0, slash)) && is_name(text.substr(slash + 1));
}

bool is_commit_hash(std::string_view text) {
  if (text.size() != 40) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

void check_revision(std::string_view revision) {
  const auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format("--revision '{}': {}", revision, why));
  };
  if (revision.empty()) throw bad("empty");
  if (revision.front() == '/') throw bad("starts with '/'");
  for (char c : revision) {
    if (static_cast<unsigned char>(c) < 0x20 || c == '\\') throw bad("not a branch, tag or commit");
  }
  size_t start = 0;
  while (start <= revision.size()) {
    size_t end = revision.find('/', start);
    if (end == std::string_view::npos) end = revision.size();
    const std::string_view segment = revision.substr(start, end - start);
    if (segment.empty() || segment == "." || segment == "..") {
      throw bad("has an empty, '.' or '..' part");
    }
    start = end + 1;
  }
}

std::string repo_folder_name(std::string_view repo_id) {
  std::string out = "models--";
  for (char c : repo_id) {
    if (c == '/') {
      out += "--";
    } else {
      out += c;
    }
  }
  return out;
}

RepoCache::RepoCache(const fs::path& cache_dir, std::string_view repo_id)
    : root_(cache_dir),
      dir_(cache_dir / repo_folder_name(repo_id)),
      folder_(repo_folder_name(repo_id)) {}

fs::path RepoCache::snapshot_dir(std::string_view commit) const {
  return dir_ / "snapshots" / std::string(commit);
}

fs::path RepoCache::blob_path(std::string_view etag) const {
  return dir_ / "blobs" / std::string(etag);
}

fs::path RepoCache::lock_path(std::string_view etag) const {
  return root_ / ".locks" / folder_ / (std::string(etag) + ".lock");
}

std::optional<std::string> RepoCache::read_ref(std::string_view revision) const {
  const fs::path path = dir_ / "refs" / std::string(revision);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path);
  std::string commit;
  std::getline(in, commit);
  while (!commit.empty() && (commit.back() == '\r' || commit.back() == ' ')) commit.pop_back();
  if (!is_commit_hash(commit)) {
    throw InvalidArgument(
        fmt::format("{}: holds '{}', not a commit hash (a damaged cache entry: "
                    "delete the file and run again)",
                    path.string(), commit));
  }
  return commit;
}

void RepoCache::write_ref(std::string_view revision, std::string_view commit) const {
  const fs::path path = dir_ / "refs" / std::string(revision);
  fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;  // no newline, as huggingface_hub writes it
    if (!out.flush()) fail_io("cannot write", tmp);
  }
  fs::rename(tmp, path);
}

void RepoCache::link(std::string_view commit, std::string_view filename,
                     std::string_view etag) const {
  const fs::path pointer = snapshot_dir(commit) / std::string(filename);
  fs::create_directories(pointer.parent_path());
  // snapshots/{commit}/a/b -> ../../../blobs/{etag}: up one level per folder of the name.
  std::string up = "../../";
  for (char c : filename) {
    if (c == '/') up += "../";
  }
  const fs::path target = up + "blobs/" + std::string(etag);
  std::error_code ec;
  fs::remove(pointer, ec);
  fs::create_symlink(target, pointer, ec);
  if (ec && !(fs::is_symlink(pointer) && fs::read_symlink(pointer) == target)) {
    throw Error(
        fmt::format("cannot link {} to {}: {}", pointer.string(), target.string(), ec.message()));
  }
}

FileLock::FileLock(const fs::path& path) {
  fs::create_directories(path.parent_path());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_io("cannot open the lock file", path);
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int saved = errno;
    ::close(fd_);
    errno = saved;
    fail_io("cannot lock", path);
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace pagoda::hub
