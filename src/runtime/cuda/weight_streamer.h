#pragma once
// Checkpoint weights to the GPU through pinned staging buffers, overlapping disk reads and copies.
//
// Why: a cudaMemcpy from pageable memory (the mmapped checkpoint) is staged by the driver through
// its own small pinned buffer, one copy at a time, and runs at ~6 GB/s; the host link does ~50 GB/s
// from pinned memory, and the reads (page faults or page-cache copies) parallelise over cores.
//
// How: plan_weight_chunks (runtime/weight_chunk_plan.h) packs the tensors, in upload order, into
// chunks of one staging buffer each; chunk i uses buffer i % N of a ring of N pinned buffers, each
// with a CUDA event. Every thread of the pool claims the next chunk, waits for its buffer's turn
// (chunk i - N has enqueued its copy) and then for the buffer's event (that copy is done), copies
// the tensor bytes from the mmapped file into the buffer, enqueues cudaMemcpyAsync on one copy
// stream and records the event. So while the copy engine drains chunk i, other threads are
// already reading chunks i+1 .. i+N-1. A tensor stored in another dtype (f32 checkpoints) is
// copied into the buffer's device staging slot and converted on the device into its destination,
// chunk by chunk (the conversion is elementwise, and chunks split at element boundaries). A fused
// destination (qkv, gate_up) is one upload per checkpoint tensor at its row offset.
// When pinned memory cannot be had, the old path runs instead: pageable copies, one per tensor.
#include <cstdint>
#include <functional>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "pagoda/runtime_options.h"

namespace pagoda {

/// One checkpoint tensor and where it goes on the device.
struct WeightUpload {
  const void* src = nullptr;  // host (an mmapped checkpoint), num_elements in src_dtype
  DType src_dtype = DType::kBF16;
  void* dst = nullptr;  // device, num_elements in dst_dtype
  DType dst_dtype = DType::kBF16;
  int64_t num_elements = 0;
};

/// How stream_weights stages its copies.
struct WeightStreamOptions {
  bool pinned = true;  // false: pageable copies, as before the pinned ring
  int num_buffers = 8;
  int64_t buffer_bytes = int64_t{16} << 20;

  /// For a pool of `num_threads` readers: the runtime options' load_pinned, load_buffers (0: two
  /// per reader, 4 to 16) and load_buffer_mib.
  [[nodiscard]] static WeightStreamOptions from(const RuntimeOptions& options, int num_threads);
};

/// Copies every upload to GPU `device`, converting dtypes on the device, and returns when all are
/// there. Reads run on all of `pool`'s threads. `progress` (may be empty) is called with the
/// fraction of bytes done, from one thread at a time. Logs the bandwidth reached. Falls back to
/// pageable copies, with a warning, when pinned memory cannot be allocated.
void stream_weights(std::span<const WeightUpload> uploads, int device,
                    const WeightStreamOptions& options, ThreadPool& pool,
                    const std::function<void(double)>& progress);

}  // namespace pagoda
