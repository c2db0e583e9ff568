#include "runtime/cuda/weight_streamer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/logging.h"
#include "kernels/cuda/tensor_ops.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/weight_chunk_plan.h"

namespace pagoda {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

int64_t upload_bytes(const WeightUpload& u) {
  return u.num_elements * static_cast<int64_t>(dtype_size(u.src_dtype));
}

/// Reports the fraction of bytes uploaded; callable from any thread.
class ProgressMeter {
 public:
  ProgressMeter(const std::function<void(double)>& report, int64_t total)
      : report_(report), total_(total) {}

  void add(int64_t bytes) {
    if (!report_ || total_ <= 0) return;
    std::lock_guard lock(mutex_);
    done_ += bytes;
    report_(std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_)));
  }

 private:
  const std::function<void(double)>& report_;
  int64_t total_;
  int64_t done_ = 0;
  std::mutex mutex_;
};

/// A non-blocking stream owned for the duration of one load.
class CopyStream {
 public:
  CopyStream() { PAGODA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~CopyStream() {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;
  [[nodiscard]] cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

/// The ring: num_buffers pinned host buffers in one allocation, one event per buffer, and (when a
/// dtype converts) a device staging slot per buffer. Destruction waits for the copy stream first,
/// so that no copy still reads a buffer that is freed, also when a reader threw.
class StagingRing {
 public:
  /// nullptr (after a warning) when the pinned allocation fails.
  [[nodiscard]] static std::unique_ptr<StagingRing> create(int num_buffers, int64_t buffer_bytes,
                                                           bool device_staging,
                                                           cudaStream_t stream) {
    auto ring = std::unique_ptr<StagingRing>(new StagingRing(num_buffers, buffer_bytes, stream));
    const size_t total = static_cast<size_t>(num_buffers) * static_cast<size_t>(buffer_bytes);
    const cudaError_t err = cudaHostAlloc(&ring->host_, total, cudaHostAllocDefault);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky; clear it so that later checks do not see it
      ring->host_ = nullptr;
      spdlog::warn(
          "weights: cannot pin {} MiB of host memory for staging ({}); using pageable copies "
          "(slower)",
          total / kMiB, cudaGetErrorString(err));
      return nullptr;
    }
    for (int b = 0; b < num_buffers; ++b) {
      cudaEvent_t event = nullptr;
      // Blocking sync: a reader waiting for its buffer sleeps instead of spinning on a core that
      // another reader needs.
      PAGODA_CUDA_CHECK(
          cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync));
      ring->events_.push_back(event);
    }
    if (device_staging) ring->staging_ = DeviceBuffer(total);
    return ring;
  }

  ~StagingRing() {
    cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    if (host_ != nullptr) cudaFreeHost(host_);
  }
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  [[nodiscard]] int size() const { return num_buffers_; }
  [[nodiscard]] cudaStream_t stream() const { return stream_; }
  [[nodiscard]] cudaEvent_t event(int b) const { return events_[static_cast<size_t>(b)]; }
  [[nodiscard]] char* host(int b) const { return static_cast<char*>(host_) + offset(b); }
  [[nodiscard]] char* staging(int b) const { return staging_.as<char>() + offset(b); }

 private:
  StagingRing(int num_buffers, int64_t buffer_bytes, cudaStream_t stream)
      : num_buffers_(num_buffers), buffer_bytes_(buffer_bytes), stream_(stream) {}
  [[nodiscard]] size_t offset(int b) const {
    return static_cast<size_t>(b) * static_cast<size_t>(buffer_bytes_);
  }

  int num_buffers_;
  int64_t buffer_bytes_;
  cudaStream_t stream_;  // borrowed
  void* host_ = nullptr;
  std::vector<cudaEvent_t> events_;
  DeviceBuffer staging_;  // [num_buffers, buffer_bytes], only when some upload converts
};

/// Reads one piece into the pinned buffer and enqueues its way to the destination.
void stage_piece(const WeightUpload& u, const ChunkPiece& p, const StagingRing& ring, int b) {
  char* host = ring.host(b) + p.buffer_offset;
  std::memcpy(host, static_cast<const char*>(u.src) + p.item_offset, static_cast<size_t>(p.bytes));
  const auto bytes = static_cast<size_t>(p.bytes);
  if (u.src_dtype == u.dst_dtype) {
    PAGODA_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(u.dst) + p.item_offset, host, bytes,
                                      cudaMemcpyHostToDevice, ring.stream()));
    return;
  }
  const auto src_size = static_cast<int64_t>(dtype_size(u.src_dtype));
  const auto dst_size = static_cast<int64_t>(dtype_size(u.dst_dtype));
  char* slot = ring.staging(b) + p.buffer_offset;
  PAGODA_CUDA_CHECK(cudaMemcpyAsync(slot, host, bytes, cudaMemcpyHostToDevice, ring.stream()));
  PAGODA_CUDA_CHECK(cuda::convert(slot, u.src_dtype,
                                  static_cast<char*>(u.dst) + p.item_offset / src_size * dst_size,
                                  u.dst_dtype, p.bytes / src_size, ring.stream()));
}

/// The pipeline of the header comment. Buffer b serves chunks b, b + N, b + 2N, ...: turn[b] is
/// the chunk allowed to fill it next, so that a reader never records b's event before the
/// previous user of b has recorded its own (an event waited on before it is recorded would not
/// wait at all). The smallest unfinished chunk never waits on a reader, so this cannot deadlock.
void stream_pinned(std::span<const WeightUpload> uploads, std::span<const WeightChunk> chunks,
                   const StagingRing& ring, int device, ThreadPool& pool, ProgressMeter& progress) {
  std::mutex mutex;
  std::condition_variable turn_changed;
  std::vector<size_t> turn(static_cast<size_t>(ring.size()));
  for (size_t b = 0; b < turn.size(); ++b) turn[b] = b;
  bool failed = false;  // a reader threw: the others stop instead of waiting for its turn
  std::atomic<size_t> next_chunk{0};
  pool.run_on_all([&](int, int) {
    try {
      PAGODA_CUDA_CHECK(cudaSetDevice(device));  // the current device is per thread
      for (size_t i = next_chunk++; i < chunks.size(); i = next_chunk++) {
        const WeightChunk& chunk = chunks[i];
        const int b = chunk.buffer;
        {
          std::unique_lock lock(mutex);
          turn_changed.wait(lock, [&] { return failed || turn[static_cast<size_t>(b)] == i; });
          if (failed) return;
        }
        PAGODA_CUDA_CHECK(cudaEventSynchronize(ring.event(b)));  // chunk i - N left the buffer
        for (const ChunkPiece& p : chunk.pieces) stage_piece(uploads[p.item], p, ring, b);
        PAGODA_CUDA_CHECK(cudaEventRecord(ring.event(b), ring.stream()));
        {
          std::lock_guard lock(mutex);
          turn[static_cast<size_t>(b)] = i + static_cast<size_t>(ring.size());
        }
        turn_changed.notify_all();
        progress.add(chunk.bytes());
      }
    } catch (...) {
      {
        std::lock_guard lock(mutex);
        failed = true;
      }
      turn_changed.notify_all();
      throw;
    }
  });
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(ring.stream()));
}

/// The path without pinned memory: one pageable copy per tensor (the driver stages it), through
/// one device buffer, grown to the largest tensor, when the dtype converts.
void stream_pageable(std::span<const WeightUpload> uploads, cudaStream_t stream,
                     ProgressMeter& progress) {
  DeviceBuffer staging;
  for (const WeightUpload& u : uploads) {
    const auto bytes = static_cast<size_t>(upload_bytes(u));
    if (u.src_dtype == u.dst_dtype) {
      PAGODA_CUDA_CHECK(cudaMemcpyAsync(u.dst, u.src, bytes, cudaMemcpyHostToDevice, stream));
    } else {
      if (staging.size() < bytes) {
        PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));
        staging = DeviceBuffer(bytes);
      }
      PAGODA_CUDA_CHECK(
          cudaMemcpyAsync(staging.get(), u.src, bytes, cudaMemcpyHostToDevice, stream));
      PAGODA_CUDA_CHECK(
          cuda::convert(staging.get(), u.src_dtype, u.dst, u.dst_dtype, u.num_elements, stream));
    }
    progress.add(static_cast<int64_t>(bytes));
  }
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

WeightStreamOptions WeightStreamOptions::from(const RuntimeOptions& runtime, int num_threads) {
  WeightStreamOptions options;
  options.pinned = runtime.load_pinned;
  options.num_buffers =
      runtime.load_buffers > 0 ? runtime.load_buffers : std::clamp(2 * num_threads, 4, 16);
  options.buffer_bytes = int64_t{runtime.load_buffer_mib} * kMiB;
  return options;
}

void stream_weights(std::span<const WeightUpload> uploads, int device,
                    const WeightStreamOptions& options, ThreadPool& pool,
                    const std::function<void(double)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  PAGODA_CUDA_CHECK(cudaSetDevice(device));
  std::vector<StreamItem> items;
  items.reserve(uploads.size());
  int64_t total = 0;
  bool converts = false;
  for (const WeightUpload& u : uploads) {
    items.push_back(StreamItem{upload_bytes(u), static_cast<int64_t>(dtype_size(u.src_dtype))});
    total += items.back().bytes;
    converts = converts || u.src_dtype != u.dst_dtype;
  }
  ProgressMeter meter(progress, total);
  CopyStream stream;
  std::vector<WeightChunk> chunks;
  std::unique_ptr<StagingRing> ring;
  int num_buffers = 0;
  if (options.pinned && total > 0) {
    chunks = plan_weight_chunks(items, options.buffer_bytes, options.num_buffers);
    // A small checkpoint pins no more buffers than it has chunks (chunk i uses buffer i % N).
    num_buffers =
        static_cast<int>(std::min(chunks.size(), static_cast<size_t>(options.num_buffers)));
    ring = StagingRing::create(num_buffers, options.buffer_bytes, converts, stream.get());
  }
  std::string how;
  if (ring != nullptr) {
    stream_pinned(uploads, chunks, *ring, device, pool, meter);
    how = fmt::format("{} pinned buffers of {} MiB, {} reader threads", num_buffers,
                      options.buffer_bytes / kMiB, pool.num_threads());
  } else {
    stream_pageable(uploads, stream.get(), meter);
    how = "pageable copies";
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("weights: {:.2f} GB to GPU {} in {:.2f} s, {:.1f} GB/s ({})", total / 1e9, device,
               seconds, seconds > 0 ? total / 1e9 / seconds : 0.0, how);
}

}  // namespace pagoda
