#include "fake_hub.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "hub/checksum.h"

namespace pagoda::hub::testing {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct FakeHub::Net {
  asio::io_context io;
  tcp::acceptor acceptor{io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  std::optional<asio::ssl::context> tls;
};

struct FakeHub::Reply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  uint64_t drop_after = UINT64_MAX;  // send this many body bytes, then close
};

namespace {

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

FakeHub::Reply error(int status, const std::string& code, const std::string& message) {
  FakeHub::Reply r;
  r.status = status;
  if (!code.empty()) r.headers.emplace_back("X-Error-Code", code);
  r.headers.emplace_back("X-Error-Message", message);
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = nlohmann::json{{"error", message}}.dump();
  return r;
}

/// The bytes, or from a `Range: bytes=N-` on (206, or 416 past the end).
FakeHub::Reply with_range(const std::string& bytes, const FakeHub::Request& request,
                          bool ignore_range) {
  FakeHub::Reply r;
  r.headers.emplace_back("Accept-Ranges", "bytes");
  uint64_t start = 0;
  if (!request.range.empty() && !ignore_range) {
    start = std::stoull(request.range.substr(6));  // "bytes=N-"
    if (start >= bytes.size()) {
      FakeHub::Reply e = error(416, "", "range not satisfiable");
      e.headers.emplace_back("Content-Range", "bytes */" + std::to_string(bytes.size()));
      return e;
    }
    r.status = 206;
    r.headers.emplace_back("Content-Range", "bytes " + std::to_string(start) + "-" +
                                                std::to_string(bytes.size() - 1) + "/" +
                                                std::to_string(bytes.size()));
  }
  r.body = bytes.substr(start);
  return r;
}

/// A self-signed P-256 certificate for `names` (DNS names or IP addresses) and its key, in PEM.
std::pair<std::string, std::string> self_signed_certificate(const std::vector<std::string>& names) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* subject = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("pagoda fake hub"), -1, -1, 0);
  X509_set_issuer_name(cert, subject);
  std::string san;
  for (const std::string& name : names) {
    const bool ip = name.find_first_not_of("0123456789.") == std::string::npos;
    san += (san.empty() ? "" : ",") + std::string(ip ? "IP:" : "DNS:") + name;
  }
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, san.c_str());
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  X509_sign(cert, key, EVP_sha256());
  const auto pem = [](auto write) {
    BIO* bio = BIO_new(BIO_s_mem());
    write(bio);
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    std::string out(data, static_cast<size_t>(n));
    BIO_free(bio);
    return out;
  };
  std::string cert_pem = pem([&](BIO* b) { PEM_write_bio_X509(b, cert); });
  std::string key_pem =
      pem([&](BIO* b) { PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); });
  X509_free(cert);
  EVP_PKEY_free(key);
  return {cert_pem, key_pem};
}

}  // namespace

FakeHub::FakeHub(std::string token, std::vector<std::string> tls_names)
    : token_(std::move(token)), tls_(!tls_names.empty()), net_(std::make_unique<Net>()) {
  port_ = net_->acceptor.local_endpoint().port();
  if (tls_) {
    const auto [cert, key] = self_signed_certificate(tls_names);
    net_->tls.emplace(asio::ssl::context::tls_server);
    net_->tls->use_certificate(asio::buffer(cert), asio::ssl::context::pem);
    net_->tls->use_private_key(asio::buffer(key), asio::ssl::context::pem);
    ca_file_ =
        (std::filesystem::temp_directory_path() /
         ("fake_hub_ca_" + std::to_string(::getpid()) + "_" + std::to_string(port_) + ".pem"))
            .string();
    std::ofstream(ca_file_) << cert;
  }
  thread_ = std::thread([this] { serve(); });
}

FakeHub::~FakeHub() {
  stopping_ = true;
  beast::error_code ec;
  asio::io_context io;
  tcp::socket wake(io);
  wake.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);  // ends accept()
  thread_.join();
  if (!ca_file_.empty()) std::filesystem::remove(ca_file_);
}

std::string FakeHub::add_repo(const std::string& repo_id, std::map<std::string, std::string> files,
                              std::vector<std::string> revisions) {
  std::string listing = repo_id;
  for (const auto& [name, content] : files) listing += "\n" + name + " " + sha256_hex(content);
  const std::string commit = git_blob_sha1_hex(listing);  // any 40-hex name will do
  std::lock_guard lock(mu_);
  for (const auto& [name, content] : files) {
    if (name.ends_with(".safetensors")) {
      blobs_[sha256_hex(content)] = content;
      blob_names_[sha256_hex(content)] = name;
    }
  }
  repos_[repo_id] = Repo{commit, std::move(files), std::move(revisions)};
  return commit;
}

std::string FakeHub::add_repo_from_dir(const std::string& repo_id, const std::filesystem::path& dir,
                                       std::map<std::string, std::string> extra) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream content;
    content << in.rdbuf();
    extra.emplace(entry.path().filename().string(), content.str());
  }
  return add_repo(repo_id, std::move(extra));
}

void FakeHub::drop_once(const std::string& filename, uint64_t bytes) {
  std::lock_guard lock(mu_);
  drops_[filename] = bytes;
}

std::string FakeHub::endpoint() const {
  return (tls_ ? "https://localhost:" : "http://127.0.0.1:") + std::to_string(port_);
}

std::vector<FakeHub::Request> FakeHub::requests() const {
  std::lock_guard lock(mu_);
  return log_;
}

size_t FakeHub::request_count() const {
  std::lock_guard lock(mu_);
  return log_.size();
}

FakeHub::Reply FakeHub::route(const Request& request) {
  std::lock_guard lock(mu_);
  log_.push_back(request);
  const std::string path = request.target.substr(0, request.target.find('?'));
  const bool authorized = token_.empty() || request.authorization == "Bearer " + token_;

  if (path.starts_with("/cdn/")) {  // the CDN: no token may reach it
    if (!request.authorization.empty()) return error(400, "", "a token was sent to the CDN");
    const std::string sha = path.substr(5);
    const auto it = blobs_.find(sha);
    if (it == blobs_.end()) return error(404, "", "no such blob");
    Reply r = with_range(it->second, request, ignore_range);
    r.headers.emplace_back("ETag", "\"cdn-" + sha.substr(0, 8) + "\"");  // not the Hub's
    if (request.range.empty() && r.status == 200) {
      const auto drop = drops_.find(blob_names_[sha]);
      if (drop != drops_.end()) {
        r.drop_after = drop->second;
        drops_.erase(drop);
      }
    }
    return r;
  }

  if (path.starts_with("/api/models/")) {
    if (!authorized) return error(401, "", "Invalid credentials in Authorization header");
    const std::string rest = path.substr(12);
    const size_t at = rest.find("/revision/");
    if (at == std::string::npos) return error(404, "", "unknown API path");
    const std::string repo_id = rest.substr(0, at);
    const std::string revision = percent_decode(rest.substr(at + 10));
    const auto it = repos_.find(repo_id);
    if (it == repos_.end()) return error(404, "RepoNotFound", "Repository not found");
    const Repo& repo = it->second;
    if (revision != repo.commit &&
        std::find(repo.revisions.begin(), repo.revisions.end(), revision) == repo.revisions.end()) {
      return error(404, "RevisionNotFound", "Invalid rev id: " + revision);
    }
    nlohmann::json siblings = nlohmann::json::array();
    for (const auto& [name, content] : repo.files) siblings.push_back({{"rfilename", name}});
    Reply r;
    r.headers.emplace_back("Content-Type", "application/json");
    r.body = nlohmann::json{{"id", repo_id}, {"sha", repo.commit}, {"siblings", siblings}}.dump();
    return r;
  }

  // resolve/ and resolve-cache/: find the repository by its id's prefix.
  const bool cached = path.starts_with("/api/resolve-cache/models/");
  const std::string rest = cached ? path.substr(26) : path.substr(1);
  for (const auto& [repo_id, repo] : repos_) {
    std::string after;
    if (cached && rest.starts_with(repo_id + "/")) {
      after = rest.substr(repo_id.size() + 1);
    } else if (!cached && rest.starts_with(repo_id + "/resolve/")) {
      after = rest.substr(repo_id.size() + 9);
    } else {
      continue;
    }
    if (!authorized) return error(401, "", "Invalid credentials in Authorization header");
    const size_t slash = after.find('/');
    const std::string revision = percent_decode(after.substr(0, slash));
    const std::string filename = percent_decode(after.substr(slash + 1));
    if (revision != repo.commit &&
        std::find(repo.revisions.begin(), repo.revisions.end(), revision) == repo.revisions.end()) {
      return error(404, "RevisionNotFound", "Invalid rev id: " + revision);
    }
    const auto file = repo.files.find(filename);
    if (slash == std::string::npos || file == repo.files.end()) {
      return error(404, "EntryNotFound", "Entry not found");
    }
    Reply r;
    r.headers.emplace_back("X-Repo-Commit", repo.commit);
    if (filename.ends_with(".safetensors")) {
      const std::string sha = sha256_hex(file->second);
      r.status = 302;
      const std::string cdn = tls_ ? "https://127.0.0.1:" : "http://localhost:";
      r.headers.emplace_back("Location", cdn + std::to_string(port_) + "/cdn/" + sha);
      r.headers.emplace_back("X-Linked-Etag", "\"" + sha + "\"");
      r.headers.emplace_back("X-Linked-Size", std::to_string(file->second.size()));
      r.headers.emplace_back("ETag", "\"" + git_blob_sha1_hex("pointer " + sha) + "\"");
      r.body = "Found. Redirecting";
    } else if (!cached) {
      r.status = 307;
      r.headers.emplace_back(
          "Location", "/api/resolve-cache/models/" + repo_id + "/" + repo.commit + "/" + filename);
      r.body = "Temporary Redirect";
    } else {
      const std::string commit_header = r.headers.front().second;
      r = with_range(file->second, request, ignore_range);
      r.headers.emplace_back("X-Repo-Commit", commit_header);
      r.headers.emplace_back("ETag", "\"" + git_blob_sha1_hex(file->second) + "\"");
      const auto drop = drops_.find(filename);
      if (drop != drops_.end() && request.method == "GET" && request.range.empty()) {
        r.drop_after = drop->second;
        drops_.erase(drop);
      }
    }
    return r;
  }
  return error(404, "RepoNotFound", "Repository not found");
}

void FakeHub::serve() {
  while (!stopping_) {
    tcp::socket socket(net_->io);
    beast::error_code ec;
    net_->acceptor.accept(socket, ec);
    if (stopping_) break;
    if (ec) continue;
    if (!tls_) {
      serve_connection(socket, "");
      socket.shutdown(tcp::socket::shutdown_both, ec);
      continue;
    }
    beast::ssl_stream<tcp::socket> stream(std::move(socket), *net_->tls);
    stream.handshake(asio::ssl::stream_base::server, ec);
    if (ec) continue;  // e.g. the client refused the certificate
    const char* sni = SSL_get_servername(stream.native_handle(), TLSEXT_NAMETYPE_host_name);
    serve_connection(stream, sni == nullptr ? "" : sni);
    beast::get_lowest_layer(stream).close(ec);
  }
}

template <class Stream>
void FakeHub::serve_connection(Stream& stream, const std::string& server_name) {
  beast::error_code ec;
  beast::flat_buffer buffer;
  for (;;) {
    http::request<http::string_body> req;
    http::read(stream, buffer, req, ec);
    if (ec) return;
    const Request logged{std::string(req.method_string()),
                         std::string(req.target()),
                         std::string(req[http::field::host]),
                         std::string(req[http::field::range]),
                         std::string(req[http::field::authorization]),
                         server_name};
    const Reply reply = route(logged);
    if (reply.drop_after < reply.body.size()) {
      const std::string raw =
          "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(reply.body.size()) + "\r\n\r\n" +
          reply.body.substr(0, reply.drop_after);
      asio::write(stream, asio::buffer(raw), ec);
      return;
    }
    http::response<http::string_body> res{static_cast<http::status>(reply.status), 11};
    for (const auto& [name, value] : reply.headers) res.set(name, value);
    res.keep_alive(req.keep_alive());
    if (req.method() == http::verb::head) {
      res.set(http::field::content_length, std::to_string(reply.body.size()));
    } else {
      res.body() = reply.body;
      res.prepare_payload();
    }
    http::write(stream, res, ec);
    if (ec || !req.keep_alive()) return;
  }
}

}  // namespace pagoda::hub::testing
