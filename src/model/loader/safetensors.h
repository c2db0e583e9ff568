#pragma once
// Reading safetensors checkpoints in place: the file is memory-mapped and tensors are views into
// it. Format: 8-byte little-endian header length N, N bytes of JSON header
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}), then the data.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace pagoda {

/// One memory-mapped .safetensors file with its validated tensor index.
class SafetensorsFile {
 public:
  /// Maps and validates the file; throws InvalidArgument naming the file (and tensor) when the
  /// header length runs past the end, the header is malformed, a dtype is unknown or a tensor's
  /// bytes lie outside the file.
  explicit SafetensorsFile(const std::string& path);

  [[nodiscard]] const std::string& path() const { return file_.path(); }
  /// name -> view into the mapped file.
  [[nodiscard]] const std::map<std::string, Tensor>& tensors() const { return tensors_; }

 private:
  MappedFile file_;
  std::map<std::string, Tensor> tensors_;
};

/// All weights of a checkpoint by name, wherever they live: one or many safetensors shards, or
/// buffers pagoda made itself (--load-format dummy).
class WeightStore {
 public:
  /// Opens model.safetensors, or every shard named by model.safetensors.index.json.
  [[nodiscard]] static WeightStore open_directory(const std::string& model_dir);

  /// Adds one file's tensors; a name present twice is an error naming both files.
  void add_file(const std::string& path);
  /// Adds other's tensors `names` (name in other -> name here), keeping other's files mapped and
  /// its buffers alive for as long as this store lives (an EAGLE head's shared embedding and LM
  /// head from the target's checkpoint). InvalidArgument for a missing or already present name.
  void take_from(WeightStore&& other,
                 const std::vector<std::pair<std::string, std::string>>& names);
  /// Adds a tensor that the store owns (dummy weights, converted tensors), replacing any of that
  /// name (a tensor-parallel rank's slice).
  void add_owned(const std::string& name, DType dtype, const Shape& shape, Buffer buffer);
  /// Replaces tensor `name` by the view of `shape` starting byte_offset bytes into it (a
  /// tensor-parallel rank's rows; the memory stays the store's). Example: rows [2, 4) of a [4, 8]
  /// f32 tensor are shape [2, 8] at byte offset 2 * 8 * 4 = 64.
  void replace_with_view(const std::string& name, const Shape& shape, size_t byte_offset);
  /// --dtype on the CPU: every float tensor (f32, bf16, f16) of another dtype is replaced by an
  /// owned copy in `target` (round to nearest even, as torch's .to()); the mapped file's bytes
  /// are no longer used for it. Returns how many tensors were converted.
  size_t convert_floats(DType target, ThreadPool& pool);

  [[nodiscard]] bool contains(const std::string& name) const { return index_.count(name) != 0; }
  /// The tensor `name`; throws InvalidArgument naming the checkpoint and the tensor when missing.
  [[nodiscard]] const Tensor& get(const std::string& name) const;
  /// Where tensor `name` came from, for error messages.
  [[nodiscard]] std::string source_of(const std::string& name) const;
  [[nodiscard]] const std::string& description() const { return description_; }
  [[nodiscard]] std::vector<std::string> names() const;

 private:
  struct Entry {
    Tensor tensor;
    std::string source;
  };
  std::string description_;  // the directory or "dummy weights"
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<Buffer> owned_;
  std::map<std::string, Entry> index_;

  friend WeightStore make_empty_weight_store(const std::string& description);
};

/// An empty store, for weights made in memory.
[[nodiscard]] WeightStore make_empty_weight_store(const std::string& description);

}  // namespace pagoda
