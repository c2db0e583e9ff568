#pragma once
// The cuBLASLt choices of earlier start-ups on disk, so that the next start-up on the same GPU
// and library skips timing the candidates (about 2 s of an 8B model's warm-up). One JSON file for
// every device of the machine:
//   {"version": 1, "devices": {"<signature>": [[m, n, k, dtype, bias, candidate], ...]}}
// where the signature names the GPU model, its SM count and the cuBLASLt version (a choice is the
// index of a candidate in the heuristic's list, which those three fix). Unreadable or foreign
// files are ignored with a warning: the cache only ever saves time.
#include <string>
#include <vector>

#include "kernels/cuda/linear.h"

namespace pagoda {

class TuningCache {
 public:
  /// path "": no cache (load finds nothing, save does nothing).
  explicit TuningCache(std::string path) : path_(std::move(path)) {}

  /// The choices saved for `signature`.
  [[nodiscard]] std::vector<cuda::TunedChoice> load(const std::string& signature) const;
  /// Replaces the choices of `signature`, keeping other devices' entries; written to a temporary
  /// file and renamed, so readers see the old file or the new one.
  void save(const std::string& signature, const std::vector<cuda::TunedChoice>& choices) const;

 private:
  std::string path_;
};

}  // namespace pagoda
