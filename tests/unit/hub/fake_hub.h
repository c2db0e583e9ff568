#pragma once
// A local HTTP server that speaks the Hugging Face Hub's file API, for the hub tests (CI has no
// internet). On 127.0.0.1 and a port the kernel picks; one thread answers one connection at a
// time. Like the Hub:
//   GET  /api/models/{repo}/revision/{rev}  {"id", "sha", "siblings": [{"rfilename"}]}; 404
//        with X-Error-Code RepoNotFound / RevisionNotFound
//   HEAD|GET /{repo}/resolve/{rev}/{file}   an LFS file (*.safetensors): 302 to
//        http://localhost:{port}/cdn/{sha256} (another host) with X-Linked-Etag, X-Linked-Size;
//        any other file: 307 to the relative /api/resolve-cache/models/{repo}/{commit}/{file},
//        which answers with ETag (the git blob id); X-Repo-Commit on both
//   GET  /cdn/{sha256}                       the bytes, with Range; 400 if a token comes along
// With a token set, /api and resolve/ answer 401 unless `Authorization: Bearer {token}`. Faults:
// drop_once() sends part of a file's bytes and closes the connection; ignore_range answers 200.
// With `tls_names` the server speaks https only, with a self-signed certificate for those names
// (ca_file() is its PEM), at https://localhost:{port}; the CDN is then https://127.0.0.1:{port}.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pagoda::hub::testing {

class FakeHub {
 public:
  struct Request {
    std::string method;
    std::string target;
    std::string host;
    std::string range;          // the Range header, "" when absent
    std::string authorization;  // "" when absent
    std::string server_name;    // the TLS SNI the client sent, "" when none (or plain http)
  };

  struct Reply;  // an answer, or a connection to drop mid-body

  explicit FakeHub(std::string token = "", std::vector<std::string> tls_names = {});
  ~FakeHub();
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  /// Adds a repository at one commit: `files` by name; *.safetensors are served as LFS files.
  /// `revisions` name the commit too (e.g. "main"). Returns the commit hash.
  std::string add_repo(const std::string& repo_id, std::map<std::string, std::string> files,
                       std::vector<std::string> revisions = {"main"});
  /// A repository with every file of a directory, plus `extra` files.
  std::string add_repo_from_dir(const std::string& repo_id, const std::filesystem::path& dir,
                                std::map<std::string, std::string> extra = {});

  /// The next GET of the bytes of `filename` (any repo) without a Range sends `bytes` of them
  /// and then closes the connection.
  void drop_once(const std::string& filename, uint64_t bytes);
  std::atomic<bool> ignore_range{false};

  [[nodiscard]] std::string endpoint()
      const;  // http://127.0.0.1:{port} or https://localhost:{port}
  [[nodiscard]] std::string ca_file() const { return ca_file_; }
  [[nodiscard]] uint16_t port() const { return port_; }
  [[nodiscard]] std::vector<Request> requests() const;
  [[nodiscard]] size_t request_count() const;

 private:
  struct Repo {
    std::string commit;
    std::map<std::string, std::string> files;
    std::vector<std::string> revisions;
  };
  struct Net;  // the Asio objects
  void serve();
  template <class Stream>
  void serve_connection(Stream& stream, const std::string& server_name);
  Reply route(const Request& request);

  std::string token_;
  bool tls_ = false;
  std::string ca_file_;
  uint16_t port_ = 0;
  std::unique_ptr<Net> net_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::map<std::string, Repo> repos_;
  std::map<std::string, std::string> blobs_;       // sha256 -> bytes
  std::map<std::string, std::string> blob_names_;  // sha256 -> file name
  std::map<std::string, uint64_t> drops_;          // file name -> bytes to send before closing
  std::vector<Request> log_;
  std::thread thread_;
};

}  // namespace pagoda::hub::testing
