#pragma once
// A read-only memory map of a whole file: weights are read from the page cache without copies.
#include <cstddef>
#include <cstdint>
#include <string>

namespace pagoda {

/// Read-only mmap of a file; throws NotFound or InvalidArgument naming the path.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  [[nodiscard]] const uint8_t* data() const { return data_; }
  [[nodiscard]] size_t size() const { return size_; }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

/// Reads a whole (small) text file; throws NotFound naming the path.
[[nodiscard]] std::string read_text_file(const std::string& path);

}  // namespace pagoda
