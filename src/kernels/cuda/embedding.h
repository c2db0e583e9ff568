#pragma once
// Token embedding lookup on the GPU.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace pagoda::cuda {

/// out[t, :] = table[ids[t], :]. ids: [num_tokens] int32 on the device; table: [vocab, hidden] and
/// out: [num_tokens, hidden], both in dtype (bf16 or f16). Ids are checked by the caller; an id
/// outside [0, vocab) writes a zero row rather than reading out of bounds.
cudaError_t embedding(const int32_t* ids, int64_t num_tokens, const void* table, int64_t vocab,
                      int64_t hidden, void* out, DType dtype, cudaStream_t stream);

}  // namespace pagoda::cuda
