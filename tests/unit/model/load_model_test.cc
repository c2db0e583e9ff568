// Loading model directories: every way a checkpoint can be broken must give an error that names
// the file and the field or tensor, never a crash. To add a case: copy stories260K into a TempDir,
// break one thing, and assert on the message.
#include "core/mapped_file.h"
#include "model/model.h"
#include "model/registry.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "core/status.h"
#include "model/config.h"
#include "model/loader/safetensors.h"
#include "test_checkpoint.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using testing::RawTensor;
using testing::TempDir;

const std::string kStories = std::string(PAGODA_SOURCE_DIR) + "/models/stories260K";

/// A writable copy of stories260K.
struct StoriesCopy {
  TempDir dir;
  StoriesCopy() {
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
      fs::copy_file(fs::path(kStories) / f, dir.path() / f);
    }
  }
  [[nodiscard]] std::string weights() const { return (dir.path() / "model.safetensors").string(); }
};

/// The message of the exception that loading `dir` throws ("" if it loads).
std::string load_error(const std::string& dir) {
  ThreadPool pool(1);
  try {
    (void)load_model(dir, LoadOptions{}, pool);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& message, std::initializer_list<const char*> parts) {
  EXPECT_FALSE(message.empty()) << "expected an error";
  for (const char* p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' not in: " << message;
}

TEST(LoadModel, LoadsStories) { EXPECT_EQ(load_error(kStories), ""); }

TEST(LoadModel, MissingDirectory) {
  ThreadPool pool(1);
  EXPECT_THROW((void)load_model("/nonexistent/model", LoadOptions{}, pool), NotFound);
  expect_contains(load_error("/nonexistent/model"), {"/nonexistent/model", "does not exist"});
}

TEST(LoadModel, MissingOrMalformedConfig) {
  StoriesCopy m;
  fs::remove(m.dir.path() / "config.json");
  expect_contains(load_error(m.dir.str()), {"config.json", "no such file"});
  testing::write_file(m.dir.path() / "config.json", "{\"architectures\": [");
  expect_contains(load_error(m.dir.str()), {"config.json", "malformed JSON"});
  testing::write_file(m.dir.path() / "config.json",
                      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 512})");
  expect_contains(load_error(m.dir.str()), {"config.json", "'hidden_size' is missing"});
}

TEST(LoadModel, UnsupportedArchitecture) {
  StoriesCopy m;
  auto text = read_text_file(kStories + "/config.json");
  text.replace(text.find("LlamaForCausalLM"), 16, "GPTNeoXForCausalLM");
  testing::write_file(m.dir.path() / "config.json", text);
  expect_contains(load_error(m.dir.str()),
                  {"config.json", "GPTNeoXForCausalLM", "not supported", "LlamaForCausalLM"});
}

TEST(LoadModel, MissingTensor) {
  StoriesCopy m;
  auto tensors = testing::read_raw_tensors(m.weights());
  tensors.erase("model.layers.3.mlp.up_proj.weight");
  testing::write_file(m.weights(), testing::safetensors_bytes(tensors));
  expect_contains(load_error(m.dir.str()), {"missing tensor", "model.layers.3.mlp.up_proj.weight"});
}

TEST(LoadModel, WrongShape) {
  StoriesCopy m;
  auto tensors = testing::read_raw_tensors(m.weights());
  RawTensor& t = tensors.at("model.layers.0.self_attn.k_proj.weight");
  t.shape = {t.shape[1], t.shape[0]};
  testing::write_file(m.weights(), testing::safetensors_bytes(tensors));
  expect_contains(load_error(m.dir.str()),
                  {"model.safetensors", "model.layers.0.self_attn.k_proj.weight", "shape [64, 32]",
                   "expected [32, 64]"});
}

TEST(LoadModel, WrongDtype) {
  StoriesCopy m;
  auto tensors = testing::read_raw_tensors(m.weights());
  tensors.at("model.norm.weight").dtype = "I32";
  testing::write_file(m.weights(), testing::safetensors_bytes(tensors));
  expect_contains(load_error(m.dir.str()), {"model.norm.weight", "dtype int32"});
  tensors.at("model.norm.weight").dtype = "F8_E5M2";
  testing::write_file(m.weights(), testing::safetensors_bytes(tensors));
  expect_contains(load_error(m.dir.str()), {"model.norm.weight", "unsupported dtype 'F8_E5M2'"});
}

TEST(LoadModel, TruncatedSafetensors) {
  StoriesCopy m;
  const auto size = fs::file_size(m.weights());
  fs::resize_file(m.weights(), size - 100);
  expect_contains(load_error(m.dir.str()), {"model.safetensors", "truncated"});
}

TEST(LoadModel, HeaderLengthPastEndOfFile) {
  StoriesCopy m;
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(0xff);
  bytes[1] = static_cast<char>(0xff);
  testing::write_file(m.weights(), bytes + "{}");
  expect_contains(load_error(m.dir.str()),
                  {"model.safetensors", "header length 65535 runs past the end"});
  testing::write_file(m.weights(), "abc");
  expect_contains(load_error(m.dir.str()), {"model.safetensors", "too short"});
}

TEST(LoadModel, MalformedHeaderAndOffsets) {
  StoriesCopy m;
  testing::write_file(m.weights(), std::string("\x04\0\0\0\0\0\0\0", 8) + "{x}]");
  expect_contains(load_error(m.dir.str()), {"model.safetensors", "malformed header JSON"});
  auto tensors = testing::read_raw_tensors(kStories + "/model.safetensors");
  tensors.at("model.norm.weight").shape = {65};  // bytes no longer match the shape
  testing::write_file(m.weights(), testing::safetensors_bytes(tensors));
  expect_contains(load_error(m.dir.str()), {"model.norm.weight", "bytes of data for shape [65]"});
}

TEST(LoadModel, NoWeights) {
  StoriesCopy m;
  fs::remove(m.weights());
  expect_contains(load_error(m.dir.str()), {"no model.safetensors"});
}

TEST(LoadModel, ShardedCheckpointErrors) {
  StoriesCopy m;
  const auto tensors = testing::read_raw_tensors(m.weights());
  fs::remove(m.weights());
  // Split into two shards with an index, which must load.
  std::map<std::string, RawTensor> a, b;
  nlohmann::json map = nlohmann::json::object();
  int i = 0;
  for (const auto& [name, t] : tensors) {
    const bool first = i++ % 2 == 0;
    (first ? a : b)[name] = t;
    map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  testing::write_file(m.dir.path() / "model-00001-of-00002.safetensors",
                      testing::safetensors_bytes(a));
  testing::write_file(m.dir.path() / "model-00002-of-00002.safetensors",
                      testing::safetensors_bytes(b));
  testing::write_file(m.dir.path() / "model.safetensors.index.json",
                      nlohmann::json{{"weight_map", map}}.dump());
  EXPECT_EQ(load_error(m.dir.str()), "");
  // A shard named by the index but absent.
  fs::remove(m.dir.path() / "model-00002-of-00002.safetensors");
  expect_contains(load_error(m.dir.str()), {"model-00002-of-00002.safetensors", "no such file"});
  testing::write_file(m.dir.path() / "model.safetensors.index.json", "{\"weight_map\": 3}");
  expect_contains(load_error(m.dir.str()), {"model.safetensors.index.json", "weight_map"});
}

TEST(LoadModel, DummyWeightsForEveryRepoConfig) {
  // Only shapes are checked here (building a full 8B model would take minutes): every config maps
  // to an architecture and its expected tensor list.
  for (const char* name :
       {"llama-3.1-8b", "llama-3.2-1b", "mistral-7b-v0.3", "qwen2.5-7b", "qwen3-8b"}) {
    const std::string dir = std::string(PAGODA_SOURCE_DIR) + "/configs/" + name;
    const ModelConfig c = load_model_config(dir);
    const auto specs = define_model(c).tensors();
    EXPECT_GT(specs.size(), static_cast<size_t>(9 * c.num_layers)) << name;
  }
  // A small dummy model builds and runs.
  ThreadPool pool(2);
  LoadOptions options;
  options.format = LoadFormat::kDummy;
  options.dtype = DType::kBF16;
  auto model = load_model(kStories, options, pool);
  EXPECT_EQ(model->config().vocab_size, 512);
}

}  // namespace
}  // namespace pagoda
