// hub::resolve_model against a local server that speaks the Hub's file API (fake_hub.h), serving
// models/stories260K: the cache layout it leaves, what it asks the server (and what not), the
// cache-only paths (a second resolution, offline, a commit hash), resuming, and the errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/status.h"
#include "fake_hub.h"
#include "hub/cache.h"
#include "hub/checksum.h"
#include "hub/hub.h"

namespace pagoda::hub {
namespace {
namespace fs = std::filesystem;
using testing::FakeHub;

constexpr const char* kRepo = "pagoda-test/stories260K";
constexpr const char* kToken = "hf_test_token";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const fs::path kModelDir = fs::path(PAGODA_SOURCE_DIR) / "models/stories260K";

class HubDownload : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = fs::temp_directory_path() /
             fmt::format("hub_download_test_{}_{}", ::getpid(),
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(cache_);
    commit_ = hub_.add_repo_from_dir(kRepo, kModelDir,
                                     {{"pytorch_model.bin", "not for pagoda"},
                                      {"README.md", "# stories"},
                                      {"onnx/model.onnx", "not for pagoda"}});
    config_.cache_dir = cache_;
    config_.endpoint = hub_.endpoint();
    config_.token = kToken;
    config_.retry_delay_s = 0.01;
    config_.timeout_s = 30;
  }
  void TearDown() override { fs::remove_all(cache_); }

  ResolvedModel resolve(const std::string& revision = "main", bool weights = true) {
    ModelRequest r;
    r.repo_id = kRepo;
    r.revision = revision;
    r.weights = weights;
    return resolve_model(r, config_);
  }

  fs::path repo_dir() const { return cache_ / "models--pagoda-test--stories260K"; }

  FakeHub hub_{kToken};
  fs::path cache_;
  std::string commit_;
  HubConfig config_;
};

TEST_F(HubDownload, LeavesTheHuggingFaceCacheLayout) {
  std::vector<DownloadProgress> done;
  config_.on_progress = [&](const DownloadProgress& p) {
    if (p.done) done.push_back(p);
  };
  const ResolvedModel model = resolve();
  EXPECT_EQ(model.commit, commit_);
  EXPECT_EQ(model.dir, repo_dir() / "snapshots" / commit_);
  EXPECT_EQ(read_file(repo_dir() / "refs/main"), commit_);  // no newline, as huggingface_hub
  const std::string weights = read_file(kModelDir / "model.safetensors");
  const std::string config = read_file(kModelDir / "config.json");
  const std::pair<const char*, std::string> expected[] = {
      {"model.safetensors", sha256_hex(weights)},  // LFS: named by its SHA-256
      {"config.json", git_blob_sha1_hex(config)},  // git: named by its blob id
  };
  for (const auto& [name, etag] : expected) {
    const fs::path link = model.dir / name;
    ASSERT_TRUE(fs::is_symlink(link)) << name;
    EXPECT_EQ(fs::read_symlink(link), fs::path("../../blobs") / etag) << name;
    EXPECT_TRUE(fs::is_regular_file(repo_dir() / "blobs" / etag)) << name;
  }
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json",
                           "tokenizer_config.json", "model.safetensors"}) {
    EXPECT_EQ(read_file(model.dir / name), read_file(kModelDir / name)) << name;
  }
  EXPECT_EQ(model.files_downloaded, 5);
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(model.dir)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 5u);  // not README.md, NOTICE.md, golden.json, *.bin, onnx/
  for (const auto& e : fs::directory_iterator(repo_dir() / "blobs")) {
    EXPECT_EQ(e.path().extension(), "") << e.path();  // no .incomplete left
  }
  ASSERT_EQ(done.size(), 5u);
  EXPECT_EQ(done.back().filename, "model.safetensors");
  EXPECT_EQ(done.back().bytes, weights.size());
  EXPECT_EQ(done.back().total, weights.size());

  // What went over the wire: the token to the Hub only, the weights from the "CDN" host.
  bool saw_cdn = false;
  for (const FakeHub::Request& r : hub_.requests()) {
    EXPECT_EQ(r.target.find(".bin"), std::string::npos) << r.target;
    EXPECT_EQ(r.target.find("README"), std::string::npos) << r.target;
    if (r.target.starts_with("/cdn/")) {
      saw_cdn = true;
      EXPECT_EQ(r.authorization, "") << "the token leaked to another host";
      EXPECT_TRUE(r.host.starts_with("localhost:")) << r.host;
    } else {
      EXPECT_EQ(r.authorization, std::string("Bearer ") + kToken) << r.target;
    }
  }
  EXPECT_TRUE(saw_cdn);
}

TEST_F(HubDownload, ASecondResolutionMakesNoRequest) {
  const ResolvedModel first = resolve();
  const size_t after_first = hub_.request_count();
  EXPECT_GT(after_first, 0u);
  const ResolvedModel second = resolve();
  EXPECT_EQ(hub_.request_count(), after_first);
  EXPECT_EQ(second.dir, first.dir);
  EXPECT_EQ(second.files_downloaded, 0);
}

TEST_F(HubDownload, OfflineUsesTheCacheOnly) {
  config_.offline = true;
  try {
    (void)resolve();
    FAIL() << "resolved offline with an empty cache";
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("HF_HUB_OFFLINE"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(cache_.string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(hub_.request_count(), 0u);
  config_.offline = false;
  (void)resolve();
  const size_t online = hub_.request_count();
  config_.offline = true;
  EXPECT_EQ(resolve().commit, commit_);
  EXPECT_EQ(hub_.request_count(), online);
  // A snapshot that lost its weights is reported as incomplete, naming the file.
  fs::remove(repo_dir() / "snapshots" / commit_ / "model.safetensors");
  try {
    (void)resolve();
    FAIL();
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
}

TEST_F(HubDownload, ACommitHashNeedsNoRef) {
  const ResolvedModel model = resolve(commit_);
  EXPECT_EQ(model.commit, commit_);
  EXPECT_FALSE(fs::exists(repo_dir() / "refs"));  // a hash is its own ref
  const size_t after = hub_.request_count();
  config_.offline = true;
  EXPECT_EQ(resolve(commit_).dir, model.dir);
  EXPECT_EQ(hub_.request_count(), after);
}

TEST_F(HubDownload, WithoutWeightsForDummyLoads) {
  const ResolvedModel model = resolve("main", false);
  EXPECT_TRUE(fs::exists(model.dir / "config.json"));
  EXPECT_TRUE(fs::exists(model.dir / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(model.dir / "model.safetensors"));
}

TEST_F(HubDownload, NotFoundErrors) {
  try {
    ModelRequest r;
    r.repo_id = "pagoda-test/no-such-model";
    (void)resolve_model(r, config_);
    FAIL();
  } catch (const NotFound& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("pagoda-test/no-such-model not found"), std::string::npos) << m;
    EXPECT_NE(m.find(hub_.endpoint()), std::string::npos) << m;
  }
  try {
    (void)resolve("no-such-branch");
    FAIL();
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("revision 'no-such-branch' not found"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(repo_dir() / "refs"));
}

TEST_F(HubDownload, UnauthorizedNamesTheToken) {
  config_.token.clear();
  try {
    (void)resolve();
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("401"), std::string::npos) << m;
    EXPECT_NE(m.find("HF_TOKEN"), std::string::npos) << m;
  }
  config_.token = "hf_wrong";
  try {
    (void)resolve();
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("not valid"), std::string::npos) << e.what();
  }
}

TEST_F(HubDownload, ResumesAConnectionThatDrops) {
  const std::string weights = read_file(kModelDir / "model.safetensors");
  const uint64_t half = weights.size() / 2;
  hub_.drop_once("model.safetensors", half);
  hub_.drop_once("tokenizer.json", 1000);  // a regular (non-LFS) file too
  const ResolvedModel model = resolve();
  EXPECT_EQ(read_file(model.dir / "model.safetensors"), weights);
  EXPECT_EQ(read_file(model.dir / "tokenizer.json"), read_file(kModelDir / "tokenizer.json"));
  std::vector<std::string> ranges;
  for (const FakeHub::Request& r : hub_.requests()) {
    if (!r.range.empty()) ranges.push_back(r.range);
  }
  EXPECT_EQ(ranges, (std::vector<std::string>{"bytes=1000-", fmt::format("bytes={}-", half)}));
}

TEST_F(HubDownload, ResumesAnIncompleteBlobOfAnEarlierRun) {
  const std::string weights = read_file(kModelDir / "model.safetensors");
  const fs::path blobs = repo_dir() / "blobs";
  fs::create_directories(blobs);
  std::ofstream(blobs / (sha256_hex(weights) + ".incomplete"), std::ios::binary)
      << weights.substr(0, 4096);
  std::vector<uint64_t> resumed;
  config_.on_progress = [&](const DownloadProgress& p) {
    if (p.done) resumed.push_back(p.resumed_from);
  };
  const ResolvedModel model = resolve();
  EXPECT_EQ(read_file(model.dir / "model.safetensors"), weights);
  EXPECT_EQ(resumed.back(), 4096u);
  bool ranged = false;
  for (const FakeHub::Request& r : hub_.requests()) ranged |= r.range == "bytes=4096-";
  EXPECT_TRUE(ranged);
}

TEST_F(HubDownload, StartsOverWhenTheServerIgnoresTheRange) {
  const std::string weights = read_file(kModelDir / "model.safetensors");
  fs::create_directories(repo_dir() / "blobs");
  std::ofstream(repo_dir() / "blobs" / (sha256_hex(weights) + ".incomplete"), std::ios::binary)
      << weights.substr(0, 4096);
  hub_.ignore_range = true;
  EXPECT_EQ(read_file(resolve().dir / "model.safetensors"), weights);
}

TEST_F(HubDownload, ACorruptPartialFileIsDetectedAndRemoved) {
  const std::string weights = read_file(kModelDir / "model.safetensors");
  const fs::path partial = repo_dir() / "blobs" / (sha256_hex(weights) + ".incomplete");
  fs::create_directories(partial.parent_path());
  std::ofstream(partial, std::ios::binary) << std::string(4096, 'x');
  try {
    (void)resolve();
    FAIL();
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("digest"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(partial));
  EXPECT_EQ(read_file(resolve().dir / "model.safetensors"), weights);  // the next run succeeds
}

TEST_F(HubDownload, ShardsComeFromTheIndex) {
  const std::string index = R"({"metadata": {}, "weight_map": {
      "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";
  const std::string commit =
      hub_.add_repo("pagoda-test/sharded", {{"config.json", "{}"},
                                            {"model.safetensors.index.json", index},
                                            {"model-00001-of-00002.safetensors", "shard one"},
                                            {"model-00002-of-00002.safetensors", "shard two"},
                                            {"consolidated.safetensors", "not in the index"}});
  ModelRequest r;
  r.repo_id = "pagoda-test/sharded";
  const ResolvedModel model = resolve_model(r, config_);
  EXPECT_EQ(model.commit, commit);
  EXPECT_EQ(read_file(model.dir / "model-00002-of-00002.safetensors"), "shard two");
  EXPECT_FALSE(fs::exists(model.dir / "consolidated.safetensors"));
  EXPECT_TRUE(missing_files(model.dir, true).empty());
  fs::remove(model.dir / "model-00001-of-00002.safetensors");
  EXPECT_EQ(missing_files(model.dir, true),
            std::vector<std::string>{"model-00001-of-00002.safetensors"});
}

TEST_F(HubDownload, ARepoWithoutSafetensorsIsRefusedBeforeDownloading) {
  (void)hub_.add_repo("pagoda-test/bin-only",
                      {{"config.json", "{}"}, {"pytorch_model.bin", "weights"}});
  ModelRequest r;
  r.repo_id = "pagoda-test/bin-only";
  try {
    (void)resolve_model(r, config_);
    FAIL();
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("pytorch_model.bin"), std::string::npos) << e.what();
  }
  EXPECT_EQ(hub_.request_count(), 1u);  // the revision API only
}

TEST_F(HubDownload, NetworkFailuresAreClear) {
  config_.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1
  try {
    (void)resolve();
    FAIL();
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
  }
  config_.endpoint = "ftp://example.org";
  EXPECT_THROW((void)resolve(), InvalidArgument);
}

// https: the certificate is checked against the trusted store and the host name, with SNI.
class HubTls : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = fs::temp_directory_path() /
             fmt::format("hub_tls_test_{}_{}", ::getpid(),
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(cache_);
    config_.cache_dir = cache_;
    config_.token = kToken;
    config_.max_retries = 0;
  }
  void TearDown() override { fs::remove_all(cache_); }

  ResolvedModel resolve(FakeHub& hub) {
    hub.add_repo_from_dir(kRepo, kModelDir);
    config_.endpoint = hub.endpoint();
    ModelRequest r;
    r.repo_id = kRepo;
    return resolve_model(r, config_);
  }

  fs::path cache_;
  HubConfig config_;
};

TEST_F(HubTls, DownloadsWithATrustedCertificate) {
  FakeHub hub(kToken, {"localhost", "127.0.0.1"});
  config_.ca_file = hub.ca_file();
  const ResolvedModel model = resolve(hub);
  EXPECT_EQ(read_file(model.dir / "model.safetensors"), read_file(kModelDir / "model.safetensors"));
  bool saw_cdn = false;
  for (const FakeHub::Request& r : hub.requests()) {
    if (r.target.starts_with("/cdn/")) {
      saw_cdn = true;
      EXPECT_EQ(r.server_name, "") << "no SNI for an IP address";
      EXPECT_EQ(r.authorization, "");
    } else {
      EXPECT_EQ(r.server_name, "localhost") << r.target;
    }
  }
  EXPECT_TRUE(saw_cdn);
}

TEST_F(HubTls, RefusesAnUntrustedCertificate) {
  FakeHub hub(kToken, {"localhost", "127.0.0.1"});  // not in the system store
  try {
    (void)resolve(hub);
    FAIL();
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("certificate verify failed"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(hub.request_count(), 0u);
}

TEST_F(HubTls, RefusesACertificateForAnotherHost) {
  FakeHub hub(kToken, {"hub.invalid"});
  config_.ca_file = hub.ca_file();
  try {
    (void)resolve(hub);
    FAIL();
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("hostname mismatch"), std::string::npos) << e.what();
  }
  EXPECT_EQ(hub.request_count(), 0u);
}

}  // namespace
}  // namespace pagoda::hub
