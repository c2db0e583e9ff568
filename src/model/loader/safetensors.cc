#include "model/loader/safetensors.h"

#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/half.h"
#include "core/status.h"

namespace pagoda {
namespace {

using nlohmann::json;

// A header bigger than this is not a real checkpoint (the format's own reference caps it at 100
// MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw InvalidArgument(fmt::format("{}: {}", path, what));
}

Tensor parse_tensor_entry(const std::string& path, const std::string& name, const json& entry,
                          const uint8_t* data, uint64_t data_size) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    fail(path, fmt::format("tensor '{}': entry needs dtype, shape and data_offsets", name));
  }
  const json& dtype_json = entry.at("dtype");
  const json& shape_json = entry.at("shape");
  const json& offsets = entry.at("data_offsets");
  if (!dtype_json.is_string()) fail(path, fmt::format("tensor '{}': dtype must be a string", name));
  const auto dtype = dtype_from_safetensors(dtype_json.get<std::string>());
  if (!dtype) {
    fail(path,
         fmt::format("tensor '{}': unsupported dtype '{}'", name, dtype_json.get<std::string>()));
  }
  if (!shape_json.is_array() || shape_json.size() > static_cast<size_t>(Shape::kMaxDims)) {
    fail(path, fmt::format("tensor '{}': shape must be a list of at most {} dimensions", name,
                           Shape::kMaxDims));
  }
  Shape shape;
  uint64_t num_elements = 1;
  {
    std::vector<int64_t> dims;
    for (const json& d : shape_json) {
      if (!d.is_number_unsigned())
        fail(path, fmt::format("tensor '{}': shape entries must be >= 0", name));
      const uint64_t v = d.get<uint64_t>();
      if (v > (1ull << 40) || (v != 0 && num_elements > (1ull << 48) / v)) {
        fail(path, fmt::format("tensor '{}': shape too large", name));
      }
      num_elements *= v;
      dims.push_back(static_cast<int64_t>(v));
    }
    switch (dims.size()) {
      case 0:
        shape = Shape{};
        break;
      case 1:
        shape = Shape{dims[0]};
        break;
      case 2:
        shape = Shape{dims[0], dims[1]};
        break;
      case 3:
        shape = Shape{dims[0], dims[1], dims[2]};
        break;
      default:
        shape = Shape{dims[0], dims[1], dims[2], dims[3]};
        break;
    }
  }
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    fail(path, fmt::format("tensor '{}': data_offsets must be [begin, end]", name));
  }
  const uint64_t begin = offsets[0].get<uint64_t>();
  const uint64_t end = offsets[1].get<uint64_t>();
  if (begin > end) fail(path, fmt::format("tensor '{}': data_offsets begin > end", name));
  if (end > data_size) {
    fail(path, fmt::format("tensor '{}': data [{}, {}) runs past the end of the data section ({} "
                           "bytes): the file is truncated",
                           name, begin, end, data_size));
  }
  if (end - begin != num_elements * dtype_size(*dtype)) {
    fail(path, fmt::format("tensor '{}': {} bytes of data for shape {} of {}", name, end - begin,
                           shape.to_string(), dtype_name(*dtype)));
  }
  return Tensor{const_cast<uint8_t*>(data + begin), *dtype, shape};
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const uint64_t size = file_.size();
  if (size < 8) fail(path, fmt::format("too short for a safetensors header ({} bytes)", size));
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_.data(), 8);  // little-endian on every platform we run on
  if (header_len > size - 8) {
    fail(path, fmt::format("header length {} runs past the end of the file ({} bytes)", header_len,
                           size));
  }
  if (header_len > kMaxHeaderBytes)
    fail(path, fmt::format("header length {} is too large", header_len));
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(file_.data() + 8),
                         reinterpret_cast<const char*>(file_.data() + 8 + header_len));
  } catch (const json::parse_error& e) {
    fail(path, fmt::format("malformed header JSON: {}", e.what()));
  }
  if (!header.is_object()) fail(path, "header must be a JSON object");
  const uint8_t* data = file_.data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    tensors_.emplace(name, parse_tensor_entry(path, name, entry, data, data_size));
  }
}

WeightStore make_empty_weight_store(const std::string& description) {
  WeightStore store;
  store.description_ = description;
  return store;
}

WeightStore WeightStore::open_directory(const std::string& model_dir) {
  namespace fs = std::filesystem;
  WeightStore store = make_empty_weight_store(model_dir);
  const fs::path dir(model_dir);
  const fs::path single = dir / "model.safetensors";
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    json index;
    try {
      index = json::parse(read_text_file(index_path.string()));
    } catch (const json::parse_error& e) {
      fail(index_path.string(), fmt::format("malformed JSON: {}", e.what()));
    }
    if (!index.is_object() || !index.contains("weight_map") ||
        !index.at("weight_map").is_object()) {
      fail(index_path.string(), "field 'weight_map' is missing or not an object");
    }
    std::set<std::string> shards;
    for (const auto& [name, file] : index.at("weight_map").items()) {
      if (!file.is_string())
        fail(index_path.string(), fmt::format("weight_map['{}'] must be a file name", name));
      const std::string shard = file.get<std::string>();
      if (shard.find('/') != std::string::npos || shard == "..") {
        fail(index_path.string(),
             fmt::format("weight_map['{}']: '{}' is not a file in the directory", name, shard));
      }
      shards.insert(shard);
    }
    for (const std::string& shard : shards) store.add_file((dir / shard).string());
    for (const auto& [name, file] : index.at("weight_map").items()) {
      if (!store.contains(name)) {
        fail(index_path.string(), fmt::format("tensor '{}' is listed for {} but not in it", name,
                                              file.get<std::string>()));
      }
    }
  } else if (fs::exists(single)) {
    store.add_file(single.string());
  } else {
    throw NotFound(
        fmt::format("{}: no model.safetensors or model.safetensors.index.json", model_dir));
  }
  return store;
}

void WeightStore::add_file(const std::string& path) {
  auto file = std::make_unique<SafetensorsFile>(path);
  for (const auto& [name, tensor] : file->tensors()) {
    const auto [it, inserted] = index_.emplace(name, Entry{tensor, path});
    if (!inserted) {
      fail(path, fmt::format("tensor '{}' is also in {}", name, it->second.source));
    }
  }
  files_.push_back(std::move(file));
}

void WeightStore::take_from(WeightStore&& other,
                            const std::vector<std::pair<std::string, std::string>>& names) {
  for (const auto& [from, to] : names) {
    const Tensor& t = other.get(from);  // InvalidArgument naming other's checkpoint
    const auto [it, inserted] = index_.emplace(to, Entry{t, other.source_of(from)});
    if (!inserted) {
      throw InvalidArgument(
          fmt::format("{}: tensor '{}' is already in {}", other.description_, to, description_));
    }
  }
  for (auto& f : other.files_) files_.push_back(std::move(f));
  for (auto& b : other.owned_) owned_.push_back(std::move(b));
  other.index_.clear();
}

void WeightStore::add_owned(const std::string& name, DType dtype, const Shape& shape,
                            Buffer buffer) {
  PAGODA_CHECK(buffer.size() >= static_cast<size_t>(shape.num_elements()) * dtype_size(dtype));
  Tensor t{buffer.data(), dtype, shape};
  owned_.push_back(std::move(buffer));
  index_[name] = Entry{t, description_};
}

void WeightStore::replace_with_view(const std::string& name, const Shape& shape,
                                    size_t byte_offset) {
  const auto it = index_.find(name);
  PAGODA_CHECK(it != index_.end(), "replace_with_view: no tensor '{}'", name);
  Tensor& t = it->second.tensor;
  PAGODA_CHECK(byte_offset + static_cast<size_t>(shape.num_elements()) * dtype_size(t.dtype) <=
                   t.num_bytes(),
               "replace_with_view: {} bytes past offset {} of '{}'", t.num_bytes(), byte_offset,
               name);
  t = Tensor{static_cast<std::byte*>(t.data) + byte_offset, t.dtype, shape};
}

namespace {

float load_float(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16:
      return f16_to_float(static_cast<const uint16_t*>(data)[i]);
    default:
      PAGODA_CHECK(false, "not a float dtype: {}", dtype_name(dtype));
  }
  return 0;
}

void store_float(void* data, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(data)[i] = v;
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(data)[i] = float_to_bf16(v);
      return;
    case DType::kF16:
      static_cast<uint16_t*>(data)[i] = float_to_f16(v);
      return;
    default:
      PAGODA_CHECK(false, "not a float dtype: {}", dtype_name(dtype));
  }
}

}  // namespace

size_t WeightStore::convert_floats(DType target, ThreadPool& pool) {
  PAGODA_CHECK(is_float_weight_dtype(target), "--dtype needs a float dtype, got {}",
               dtype_name(target));
  size_t converted = 0;
  for (auto& [name, entry] : index_) {
    const Tensor& from = entry.tensor;
    if (!is_float_weight_dtype(from.dtype) || from.dtype == target) continue;
    const int64_t n = from.shape.num_elements();
    Buffer buffer(static_cast<size_t>(n) * dtype_size(target));
    const void* src = from.data;
    void* dst = buffer.data();
    const DType src_dtype = from.dtype;
    pool.parallel_for(n, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        store_float(dst, target, i, load_float(src, src_dtype, i));
    });
    const Shape shape = from.shape;
    const std::string source = entry.source;
    owned_.push_back(std::move(buffer));
    entry = Entry{Tensor{owned_.back().data(), target, shape},
                  fmt::format("{} (converted to {})", source, dtype_name(target))};
    ++converted;
  }
  return converted;
}

const Tensor& WeightStore::get(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end())
    throw InvalidArgument(fmt::format("{}: missing tensor '{}'", description_, name));
  return it->second.tensor;
}

std::string WeightStore::source_of(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? description_ : it->second.source;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, entry] : index_) out.push_back(name);
  return out;
}

}  // namespace pagoda
