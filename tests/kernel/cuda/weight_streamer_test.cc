// The pinned weight upload (runtime/cuda/weight_streamer.h) on the GPU (label gpu, device machine
// only): a safetensors fixture is streamed into device buffers, copied back and compared with the
// file, byte for byte where the dtype is kept and with the host's round-to-nearest-even conversion
// where it changes (f32 -> bf16 / f16). Two tensors go into one fused buffer, as q/k/v do.
// To add a case: add a tensor to Fixture, or a configuration to the list in StreamsTheFile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"
#include "cuda_test_util.h"
#include "model/loader/safetensors.h"
#include "runtime/cuda/weight_streamer.h"
#include "test_checkpoint.h"

namespace pagoda {
namespace {

using cuda::testing::DeviceBuffer;

std::string bytes_of(const void* data, size_t n) {
  return std::string(static_cast<const char*>(data), n);
}

/// Values away from zero (no subnormal halves) with bits below bf16 precision, so that rounding
/// is exercised.
std::vector<float> values(size_t count, float phase) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    const float x = 0.25f + 3.0f * std::abs(std::sin(static_cast<float>(i) * 0.37f + phase));
    v[i] = (i % 2 == 0 ? x : -x) * (1.0f + 1.0f / 4096.0f);
  }
  return v;
}

std::string bf16_bytes(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = float_to_bf16(v[i]);
  return bytes_of(bits.data(), bits.size() * 2);
}

/// One safetensors file of mixed sizes and dtypes in a temporary directory.
struct Fixture {
  testing::TempDir dir;
  std::string path;

  Fixture() {
    std::map<std::string, testing::RawTensor> t;
    t["odd"] = {"BF16", {37, 129}, bf16_bytes(values(37 * 129, 0.1f))};
    t["tiny"] = {"BF16", {3}, bf16_bytes(values(3, 0.2f))};
    t["q"] = {"BF16", {8, 16}, bf16_bytes(values(8 * 16, 0.3f))};
    t["k"] = {"BF16", {4, 16}, bf16_bytes(values(4 * 16, 0.4f))};
    t["big"] = {"BF16", {1000, 53}, bf16_bytes(values(1000 * 53, 0.5f))};
    const std::vector<float> f32 = values(64 * 301, 0.6f);
    t["f32"] = {"F32", {64, 301}, bytes_of(f32.data(), f32.size() * 4)};
    path = (dir.path() / "model.safetensors").string();
    testing::write_file(path, testing::safetensors_bytes(t));
  }
};

/// The expected device bytes of tensor `t` in `dtype`.
std::string expected_bytes(const Tensor& t, DType dtype) {
  if (t.dtype == dtype) return bytes_of(t.data, t.num_bytes());
  EXPECT_EQ(t.dtype, DType::kF32);
  const auto* f = static_cast<const float*>(t.data);
  std::vector<uint16_t> bits(static_cast<size_t>(t.shape.num_elements()));
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = cuda::testing::float_to_half(f[i], dtype);
  return bytes_of(bits.data(), bits.size() * 2);
}

std::string device_bytes(const void* src, size_t n) {
  std::string out(n, '\0');
  EXPECT_EQ(cudaMemcpy(out.data(), src, n, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

TEST(WeightStreamer, StreamsTheFile) {
  REQUIRE_GPU();
  Fixture fixture;
  SafetensorsFile file(fixture.path);
  const auto& tensors = file.tensors();
  struct Config {
    bool pinned;
    int num_buffers;
    int64_t buffer_bytes;
    int threads;
  };
  // Tiny buffers split "big" over many chunks and make readers wait for their turn.
  for (const Config& c :
       {Config{true, 2, 4096, 1}, Config{true, 3, 4096, 4}, Config{true, 8, 65536, 4},
        Config{true, 1, 1 << 20, 2}, Config{false, 4, 4096, 2}}) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(::testing::Message() << "pinned " << c.pinned << ", " << c.num_buffers
                                        << " buffers of " << c.buffer_bytes << ", " << c.threads
                                        << " threads, f32 -> " << dtype_name(dtype));
      std::vector<WeightUpload> uploads;
      std::map<std::string, DeviceBuffer> dst;
      for (const char* name : {"odd", "tiny", "big", "f32"}) {
        const Tensor& t = tensors.at(name);
        const DType to = t.dtype == DType::kF32 ? dtype : t.dtype;
        dst[name] = DeviceBuffer(static_cast<size_t>(t.shape.num_elements()) * 2);
        cuda::testing::poison(dst[name]);
        uploads.push_back({t.data, t.dtype, dst[name].get(), to, t.shape.num_elements()});
      }
      // The fused buffer: q's rows, then k's.
      const Tensor& q = tensors.at("q");
      const Tensor& k = tensors.at("k");
      DeviceBuffer qk(q.num_bytes() + k.num_bytes());
      cuda::testing::poison(qk);
      uploads.push_back({q.data, q.dtype, qk.get(), q.dtype, q.shape.num_elements()});
      uploads.push_back(
          {k.data, k.dtype, qk.as<char>() + q.num_bytes(), k.dtype, k.shape.num_elements()});

      ThreadPool pool(c.threads);
      std::vector<double> reports;
      WeightStreamOptions options{c.pinned, c.num_buffers, c.buffer_bytes};
      stream_weights(uploads, 0, options, pool, [&](double f) { reports.push_back(f); });

      for (const auto& [name, buffer] : dst) {
        const Tensor& t = tensors.at(name);
        const DType to = t.dtype == DType::kF32 ? dtype : t.dtype;
        EXPECT_TRUE(device_bytes(buffer.get(), buffer.bytes()) == expected_bytes(t, to))
            << "tensor " << name;
      }
      EXPECT_TRUE(device_bytes(qk.get(), qk.bytes()) ==
                  bytes_of(q.data, q.num_bytes()) + bytes_of(k.data, k.num_bytes()))
          << "fused q/k";
      ASSERT_FALSE(reports.empty());
      for (size_t i = 1; i < reports.size(); ++i) EXPECT_GE(reports[i], reports[i - 1]);
      EXPECT_DOUBLE_EQ(reports.back(), 1.0);
    }
  }
}

TEST(WeightStreamer, NothingToUpload) {
  REQUIRE_GPU();
  ThreadPool pool(2);
  stream_weights({}, 0, WeightStreamOptions{}, pool, {});
}

// Last in the file: a failing copy must end the load with an error, not a hang of the readers
// that wait for their turn.
TEST(WeightStreamer, AFailingCopyThrowsWithoutHanging) {
  REQUIRE_GPU();
  Fixture fixture;
  SafetensorsFile file(fixture.path);
  const Tensor& big = file.tensors().at("big");
  DeviceBuffer dst(big.num_bytes());
  std::vector<WeightUpload> uploads;
  for (int i = 0; i < 8; ++i) {
    uploads.push_back({big.data, big.dtype, dst.get(), big.dtype, big.shape.num_elements()});
  }
  uploads[5].dst = nullptr;
  ThreadPool pool(4);
  EXPECT_THROW(stream_weights(uploads, 0, WeightStreamOptions{true, 2, 4096}, pool, {}), Error);
}

}  // namespace
}  // namespace pagoda
