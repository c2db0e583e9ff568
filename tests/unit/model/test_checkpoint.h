#pragma once
// Test helpers that write model directories and safetensors files, so that loader errors can be
// provoked one field or tensor at a time.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/loader/safetensors.h"

namespace pagoda::testing {

/// A tensor to write: safetensors dtype tag, shape and raw bytes.
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

inline void write_file(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

/// Serialises tensors in the safetensors format.
inline std::string safetensors_bytes(const std::map<std::string, RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  std::string out(8, '\0');
  const uint64_t len = h.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + h + data;
}

/// Reads every tensor of a safetensors file back as RawTensors (to edit and rewrite).
inline std::map<std::string, RawTensor> read_raw_tensors(const std::string& path) {
  SafetensorsFile file(path);
  std::map<std::string, RawTensor> out;
  for (const auto& [name, t] : file.tensors()) {
    RawTensor raw;
    raw.dtype = t.dtype == DType::kF32 ? "F32" : t.dtype == DType::kBF16 ? "BF16" : "F16";
    for (int i = 0; i < t.shape.rank(); ++i) raw.shape.push_back(t.shape[i]);
    raw.bytes.assign(static_cast<const char*>(t.data), t.num_bytes());
    out[name] = raw;
  }
  return out;
}

/// A fresh, empty temporary directory removed at destruction.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("pagoda_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::string str() const { return path_.string(); }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path path_;
};

}  // namespace pagoda::testing
