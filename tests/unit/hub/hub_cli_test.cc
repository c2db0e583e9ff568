// `pagoda generate --model org/name` and `pagoda serve org/name` with HF_ENDPOINT at a local
// server that speaks the Hub's file API (fake_hub.h) and HF_HUB_CACHE at a temporary folder: the
// same tokens as from the local directory, then again offline from the cache alone, and the
// errors a user sees (exit status 2 and a message).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fake_hub.h"
#include "hub/http_client.h"

namespace pagoda::hub {
namespace {
namespace fs = std::filesystem;
using testing::FakeHub;

const fs::path kModelDir = fs::path(PAGODA_SOURCE_DIR) / "models/stories260K";
const std::string kPagoda = std::string(PAGODA_BINARY_DIR) + "/pagoda";
constexpr const char* kRepo = "pagoda-test/stories260K";

struct Result {
  int status = -1;
  std::string out, err;
};

/// Runs a shell command line, capturing stdout and stderr.
Result run(const std::string& command, const fs::path& scratch) {
  const fs::path err = scratch / "stderr.txt";
  Result r;
  std::FILE* pipe = ::popen((command + " 2>" + err.string()).c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err);
  std::stringstream s;
  s << in.rdbuf();
  r.err = s.str();
  return r;
}

class HubCli : public ::testing::Test {
 protected:
  void SetUp() override {
    scratch_ = fs::temp_directory_path() /
               ("hub_cli_test_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(scratch_);
    fs::create_directories(scratch_);
    commit_ = hub_.add_repo_from_dir(kRepo, kModelDir);
    // The variables the children read; nothing of the user's Hugging Face setup leaks in.
    for (const char* name : {"HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN_PATH",
                             "HUGGINGFACE_HUB_CACHE", "HUGGING_FACE_HUB_TOKEN"}) {
      ::unsetenv(name);
    }
    ::setenv("HF_ENDPOINT", hub_.endpoint().c_str(), 1);
    ::setenv("HF_HUB_CACHE", (scratch_ / "cache").c_str(), 1);
    ::setenv("HF_TOKEN", "hf_cli_token", 1);
  }
  void TearDown() override {
    for (const char* name : {"HF_ENDPOINT", "HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE"}) {
      ::unsetenv(name);
    }
    fs::remove_all(scratch_);
  }

  Result generate(const std::string& model, const std::string& extra = "") {
    return run(kPagoda + " generate --model " + model +
                   " --device cpu --kv-cache-memory 16M --prompt 'Once upon a time' "
                   "--max-tokens 24 --temperature 0 --json " +
                   extra,
               scratch_);
  }

  FakeHub hub_{"hf_cli_token"};
  fs::path scratch_;
  std::string commit_;
};

TEST_F(HubCli, GenerateFromARepoIdMatchesTheLocalDirectory) {
  const Result local = generate(kModelDir.string());
  ASSERT_EQ(local.status, 0) << local.err;
  ASSERT_NE(local.out.find("\"token_ids\""), std::string::npos) << local.out;

  const Result hub = generate(kRepo);
  ASSERT_EQ(hub.status, 0) << hub.err;
  EXPECT_EQ(hub.out, local.out);
  // stderr is not a terminal here: log lines in place of a progress bar.
  EXPECT_NE(hub.err.find("download model.safetensors"), std::string::npos) << hub.err;
  EXPECT_TRUE(fs::is_symlink(scratch_ / "cache/models--pagoda-test--stories260K/snapshots" /
                             commit_ / "model.safetensors"));

  const size_t requests = hub_.request_count();
  ::setenv("HF_HUB_OFFLINE", "1", 1);
  const Result offline = generate(kRepo);
  ASSERT_EQ(offline.status, 0) << offline.err;
  EXPECT_EQ(offline.out, local.out);
  EXPECT_EQ(hub_.request_count(), requests);
  ::unsetenv("HF_HUB_OFFLINE");

  // By commit, into a cache of --download-dir.
  const Result pinned =
      generate(kRepo, "--revision " + commit_ + " --download-dir " + (scratch_ / "other").string());
  ASSERT_EQ(pinned.status, 0) << pinned.err;
  EXPECT_EQ(pinned.out, local.out);
  EXPECT_TRUE(fs::exists(scratch_ / "other/models--pagoda-test--stories260K/snapshots" / commit_));
}

TEST_F(HubCli, ErrorsNameTheCause) {
  const Result missing = generate("pagoda-test/no-such-model");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("pagoda-test/no-such-model not found"), std::string::npos)
      << missing.err;

  ::unsetenv("HF_TOKEN");
  const Result unauthorized = generate(kRepo);
  EXPECT_EQ(unauthorized.status, 2);
  EXPECT_NE(unauthorized.err.find("HF_TOKEN"), std::string::npos) << unauthorized.err;

  ::setenv("HF_HUB_OFFLINE", "1", 1);
  const Result offline = generate(kRepo);
  EXPECT_EQ(offline.status, 2);
  EXPECT_NE(offline.err.find("HF_HUB_OFFLINE"), std::string::npos) << offline.err;
}

TEST_F(HubCli, TheTokenFileOfHfHomeIsUsed) {
  ::unsetenv("HF_TOKEN");
  fs::create_directories(scratch_ / "hf_home");
  std::ofstream(scratch_ / "hf_home/token") << "hf_cli_token\n";
  ::setenv("HF_HOME", (scratch_ / "hf_home").c_str(), 1);
  const Result r = generate(kRepo);
  EXPECT_EQ(r.status, 0) << r.err;
  ::unsetenv("HF_HOME");
}

TEST_F(HubCli, TokenizeTakesARepoIdWithoutItsWeights) {
  const std::string args = " --text 'Once upon a time'";
  const Result local =
      run(kPagoda + " tokenize --tokenizer " + kModelDir.string() + args, scratch_);
  ASSERT_EQ(local.status, 0) << local.err;
  const Result hub = run(kPagoda + " tokenize --tokenizer " + kRepo + args, scratch_);
  ASSERT_EQ(hub.status, 0) << hub.err;
  EXPECT_EQ(hub.out, local.out);
  const fs::path snapshot = scratch_ / "cache/models--pagoda-test--stories260K/snapshots" / commit_;
  EXPECT_TRUE(fs::exists(snapshot / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(snapshot / "model.safetensors"));
}

TEST_F(HubCli, ServeListsTheRepoIdAsTheModel) {
  int err_pipe[2];
  ASSERT_EQ(::pipe(err_pipe), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::dup2(err_pipe[1], STDOUT_FILENO);
    ::close(err_pipe[0]);
    ::execl(kPagoda.c_str(), kPagoda.c_str(), "serve", kRepo, "--device", "cpu", "--port", "0",
            "--kv-cache-memory", "16M", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(err_pipe[1]);
  // Read the log until the server says where it listens (or the process ends: EOF).
  std::string log, url;
  char buffer[1024];
  ssize_t n = 0;
  while (url.empty() && (n = ::read(err_pipe[0], buffer, sizeof buffer)) > 0) {
    log.append(buffer, static_cast<size_t>(n));
    const size_t at = log.find(" on http://");
    if (at != std::string::npos && log.find('\n', at) != std::string::npos) {
      url = log.substr(at + 4, log.find('\n', at) - at - 4);
    }
  }
  ASSERT_FALSE(url.empty()) << log;
  EXPECT_NE(log.find(std::string("as ") + kRepo), std::string::npos) << log;
  HttpClient client(HttpOptions{});
  const HttpResponse models = client.request("GET", parse_url(url + "/v1/models"), {});
  EXPECT_EQ(models.status, 200);
  EXPECT_NE(models.body.find(std::string("\"id\":\"") + kRepo + "\""), std::string::npos)
      << models.body;
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(err_pipe[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace pagoda::hub
