#pragma once
// Drawing logits rows on the GPU (kernels/cuda/sample_logits) for the CUDA model: one pinned
// staging area per step holds every row's parameters and sparse processor lists (one upload) and
// receives the drawn tokens and log-probabilities (one download).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "model/model.h"
#include "runtime/cuda/device_buffer.h"

namespace pagoda {

/// Stages DeviceDraws, launches the GPU sampler and unpacks its results.
class DeviceSampler {
 public:
  DeviceSampler() = default;
  ~DeviceSampler();
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  /// Enqueues on stream: the upload of the draws (rows with temperature < 0 are skipped), the
  /// sampler over logits [draws.size(), vocab] (dtype, device; read only) with workspace
  /// [draws.size(), vocab] fp32 (device; overwritten), and the download of the results. Returns
  /// whether any row is drawn. Call collect() once the stream has reached this point.
  [[nodiscard]] bool launch(const void* logits, DType dtype, int64_t vocab,
                            std::span<const DeviceDraw> draws, float* workspace,
                            cudaStream_t stream);
  /// The last launch's drawn tokens on the device, [draws.size()] int32 (rows not drawn hold
  /// nothing meaningful), valid until the next launch: a chained pass's next ids read them.
  [[nodiscard]] const int32_t* device_tokens() const {
    return reinterpret_cast<const int32_t*>(static_cast<const char*>(device_.get()) +
                                            layout_.tokens);
  }
  /// Writes the drawn rows' tokens and log-probabilities (rows with num_logprobs >= 0).
  void collect(std::span<const DeviceDraw> draws, std::span<int32_t> tokens,
               std::span<DrawnLogprobs> logprobs) const;

 private:
  struct Layout {
    size_t params = 0, penalties = 0, biases = 0, masked = 0, allowed = 0, inputs_end = 0;
    size_t tokens = 0, logprobs = 0, top_tokens = 0, top_logprobs = 0, end = 0;
  };
  void reserve(size_t bytes, cudaStream_t stream);

  void* host_ = nullptr;  // pinned, Layout of the current step
  size_t capacity_ = 0;
  DeviceBuffer device_;  // the same layout on the device
  Layout layout_;
};

}  // namespace pagoda
