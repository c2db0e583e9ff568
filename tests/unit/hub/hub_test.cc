// The pieces of hub/ without a network: URLs and redirects, repo ids and revisions, the cache's
// names and links, the ETag digests, the choice of files and the progress line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/status.h"
#include "hub/cache.h"
#include "hub/checksum.h"
#include "hub/download.h"
#include "hub/hub.h"
#include "hub/progress.h"
#include "hub/url.h"

namespace pagoda::hub {
namespace {
namespace fs = std::filesystem;

TEST(HubUrl, ParsesHostPortAndTarget) {
  const Url a = parse_url("https://huggingface.co");
  EXPECT_EQ(a.scheme, "https");
  EXPECT_EQ(a.host, "huggingface.co");
  EXPECT_EQ(a.port, "443");
  EXPECT_EQ(a.target, "/");
  EXPECT_EQ(a.origin(), "https://huggingface.co");
  const Url b = parse_url("HTTP://Mirror.Example:8080/hf/api?x=1");
  EXPECT_EQ(b.host, "mirror.example");
  EXPECT_EQ(b.port, "8080");
  EXPECT_EQ(b.target, "/hf/api?x=1");
  EXPECT_EQ(b.host_header(), "mirror.example:8080");
  const Url c = parse_url("http://[::1]:9/x");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.origin(), "http://[::1]:9");
  for (const char* bad :
       {"huggingface.co", "ftp://x/", "http://", "http://h:99999/", "http://u@h/", "http://h:x/"}) {
    EXPECT_THROW((void)parse_url(bad), InvalidArgument) << bad;
  }
}

TEST(HubUrl, ResolvesEveryKindOfLocation) {
  const Url base = parse_url("https://huggingface.co/org/m/resolve/main/config.json");
  EXPECT_EQ(resolve_location(base, "https://cdn-lfs.hf.co/repos/ab?X=1").str(),
            "https://cdn-lfs.hf.co/repos/ab?X=1");
  EXPECT_EQ(resolve_location(base, "//cdn.example/b").str(), "https://cdn.example/b");
  EXPECT_EQ(resolve_location(base, "/api/resolve-cache/models/org/m/abc/config.json").str(),
            "https://huggingface.co/api/resolve-cache/models/org/m/abc/config.json");
  EXPECT_EQ(resolve_location(base, "other.json").str(),
            "https://huggingface.co/org/m/resolve/main/other.json");
  EXPECT_EQ(resolve_location(base, "../../x").str(), "https://huggingface.co/org/m/x");
}

TEST(HubUrl, PercentEncodes) {
  EXPECT_EQ(percent_encode("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(percent_encode("sub dir/a+b.json", true), "sub%20dir/a%2Bb.json");
}

TEST(HubCache, RepoIdsAndRevisions) {
  for (const char* ok : {"gpt2", "org/name", "Qwen/Qwen2.5-0.5B-Instruct", "a_b/c.d"}) {
    EXPECT_TRUE(is_repo_id(ok)) << ok;
  }
  for (const char* bad : {"", "/abs/path", "./rel", "a/b/c", "a--b/c", "a/b..c", "-a/b", "a/b.",
                          "a b/c", "org/", "../x"}) {
    EXPECT_FALSE(is_repo_id(bad)) << bad;
  }
  EXPECT_EQ(repo_folder_name("org/name"), "models--org--name");
  EXPECT_EQ(repo_folder_name("gpt2"), "models--gpt2");
  EXPECT_TRUE(is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("main"));
  EXPECT_NO_THROW(check_revision("main"));
  EXPECT_NO_THROW(check_revision("refs/pr/1"));
  for (const char* bad : {"", "/x", "a/../b", "..", "a//b"}) {
    EXPECT_THROW(check_revision(bad), InvalidArgument) << bad;
  }
}

TEST(HubCache, RefsAndRelativeLinks) {
  const fs::path root =
      fs::temp_directory_path() / ("hub_cache_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const RepoCache cache(root, "org/name");
  EXPECT_EQ(cache.dir(), root / "models--org--name");
  EXPECT_FALSE(cache.read_ref("main"));
  const std::string commit(40, 'a');
  cache.write_ref("main", commit);
  EXPECT_EQ(cache.read_ref("main"), commit);
  cache.write_ref("refs/pr/1", commit);
  EXPECT_EQ(cache.read_ref("refs/pr/1"), commit);
  fs::create_directories(cache.blob_path("e1").parent_path());
  std::ofstream(cache.blob_path("e1")) << "one";
  cache.link(commit, "config.json", "e1");
  cache.link(commit, "sub/file.json", "e1");
  EXPECT_EQ(fs::read_symlink(cache.snapshot_dir(commit) / "config.json"), "../../blobs/e1");
  EXPECT_EQ(fs::read_symlink(cache.snapshot_dir(commit) / "sub/file.json"), "../../../blobs/e1");
  std::ifstream in(cache.snapshot_dir(commit) / "sub/file.json");
  std::string text;
  in >> text;
  EXPECT_EQ(text, "one");
  cache.link(commit, "config.json", "e1");  // again: replaced, no error
  std::ofstream(root / "models--org--name/refs/bad") << "not a hash";
  EXPECT_THROW((void)cache.read_ref("bad"), InvalidArgument);
  EXPECT_EQ(cache.lock_path("e1"), root / ".locks/models--org--name/e1.lock");
  fs::remove_all(root);
}

TEST(HubChecksum, ShaAndGitBlobIds) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // `printf 'hello\n' | git hash-object --stdin`
  EXPECT_EQ(git_blob_sha1_hex("hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
  EXPECT_EQ(git_blob_sha1_hex(""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  ContentHasher unknown("W/\"xyz\"", 3);
  EXPECT_FALSE(unknown.enabled());
  ContentHasher no_size(std::string(40, 'a'), std::nullopt);
  EXPECT_FALSE(no_size.enabled());
  EXPECT_EQ(normalize_etag("W/\"abc\""), "abc");
  EXPECT_EQ(normalize_etag("\"abc\""), "abc");
  EXPECT_EQ(normalize_etag("abc"), "abc");
}

TEST(HubFiles, OnlyWhatPagodaReads) {
  const std::vector<std::string> repo = {"README.md",
                                         ".gitattributes",
                                         "config.json",
                                         "generation_config.json",
                                         "tokenizer.json",
                                         "tokenizer_config.json",
                                         "special_tokens_map.json",
                                         "chat_template.jinja",
                                         "model.safetensors",
                                         "pytorch_model.bin",
                                         "model.gguf",
                                         "onnx/model.onnx",
                                         "tokenizer.model"};
  EXPECT_EQ(wanted_files(repo, true, "o/m"),
            (std::vector<std::string>{"config.json", "generation_config.json", "tokenizer.json",
                                      "tokenizer_config.json", "special_tokens_map.json",
                                      "chat_template.jinja", "model.safetensors"}));
  EXPECT_EQ(wanted_files(repo, false, "o/m").back(), "chat_template.jinja");
  const std::vector<std::string> sharded = {"config.json", "model.safetensors.index.json",
                                            "model-00001-of-00002.safetensors",
                                            "consolidated.safetensors"};
  EXPECT_EQ(wanted_files(sharded, true, "o/m"),
            (std::vector<std::string>{"config.json", "model.safetensors.index.json"}));
  try {
    (void)wanted_files({"config.json", "pytorch_model.bin"}, true, "o/m");
    FAIL();
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("pytorch_model.bin"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)wanted_files({"model.safetensors"}, true, "o/m"), NotFound);
}

TEST(HubProgress, Line) {
  DownloadProgress p{"model.safetensors", 3 << 20, uint64_t{12} << 20, 1 << 20, 2.0, false};
  EXPECT_EQ(progress_line(p),
            "model.safetensors  3.0 MiB / 12.0 MiB   25%  1.0 MiB/s  (resumed at 1.0 MiB)");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(uint64_t{3} << 30), "3.0 GiB");
}

}  // namespace
}  // namespace pagoda::hub
