// The cuBLASLt tuning cache file (host code, no GPU): choices round-trip per device signature,
// other devices' entries survive a save, and a missing or foreign file loads as nothing.
#include "runtime/cuda/tuning_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace pagoda {
namespace {

std::string temp_path(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("pagoda-tuning-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  return (dir / "sub" / "cublaslt-tuning.json").string();
}

TEST(TuningCache, ChoicesRoundTripPerDevice) {
  const std::string path = temp_path("roundtrip");
  const TuningCache cache(path);
  EXPECT_TRUE(cache.load("H200").empty());  // no file yet
  const std::vector<cuda::TunedChoice> h200 = {{64, 4096, 4096, 2, false, 3},
                                               {128, 6144, 4096, 2, true, 0}};
  const std::vector<cuda::TunedChoice> h100 = {{8, 128256, 4096, 2, false, 5}};
  cache.save("H200", h200);
  cache.save("H100", h100);
  EXPECT_EQ(cache.load("H200"), h200);
  EXPECT_EQ(cache.load("H100"), h100);
  cache.save("H200", {});  // replaces that device only
  EXPECT_TRUE(cache.load("H200").empty());
  EXPECT_EQ(cache.load("H100"), h100);
}

TEST(TuningCache, ForeignFilesAndNoPathLoadNothing) {
  const std::string path = temp_path("foreign");
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << "{\"something\": \"else\"}";
  const TuningCache cache(path);
  EXPECT_TRUE(cache.load("H200").empty());
  cache.save("H200", {{1, 2, 3, 2, false, 1}});  // rewrites it as a cache
  EXPECT_EQ(cache.load("H200").size(), 1u);
  const TuningCache off("");
  off.save("H200", {{1, 2, 3, 2, false, 1}});
  EXPECT_TRUE(off.load("H200").empty());
}

}  // namespace
}  // namespace pagoda
