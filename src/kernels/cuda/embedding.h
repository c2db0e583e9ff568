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

/// A vocabulary-parallel embedding (tensor parallelism, model/tensor_parallel.h): `table` holds
/// the rows [first, first + rows) of the vocabulary; token t's output row is table[ids[t] -
/// first] when ids[t] falls in the slice, zeros otherwise, so that the all-reduce (sum) of the
/// ranks' outputs is the whole embedding. Example: first 4, rows 4: ids {1, 5} give {0, table[1]}.
struct EmbeddingShard {
  const int32_t* ids = nullptr;  // [num_tokens] int32, device
  int64_t num_tokens = 0;
  const void* table = nullptr;  // [rows, hidden] in dtype
  int64_t first = 0;            // the vocabulary id of table's row 0
  int64_t rows = 0;
  int64_t hidden = 0;
  void* out = nullptr;  // [num_tokens, hidden] in dtype
  DType dtype = DType::kBF16;
};
cudaError_t embedding_shard(const EmbeddingShard& p, cudaStream_t stream);

}  // namespace pagoda::cuda
