#pragma once
// What an op needs besides its tensors: the CPU thread pool now, a CUDA stream and workspace later.
#include "core/thread_pool.h"

namespace pagoda {

/// Execution context passed to every op.
struct OpContext {
  ThreadPool* pool = nullptr;
};

}  // namespace pagoda
