#pragma once
// Sampling on the GPU for rows that need nothing but a draw: greedy, or plain temperature
// sampling. Only the chosen token ids go back to the host, not the [rows, vocab] logits.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace pagoda::cuda {

/// How one row is drawn. temperature == 0: the first maximum (greedy). temperature > 0:
/// argmax(logits / temperature + Gumbel noise), which samples softmax(logits / temperature)
/// exactly in one pass (the Gumbel-max trick). The noise of token v is a counter-based hash of
/// (seed, counter, v), so a request's draws depend on its seed and its token index alone, not on
/// the batch it runs in.
struct RowSample {
  float temperature = 0.0f;
  uint32_t reserved = 0;
  uint64_t seed = 0;
  uint64_t counter = 0;  // e.g. the number of tokens the request has generated so far
};

/// tokens[r] = the draw of row r of logits [rows, vocab] (dtype f32, bf16 or f16, row-major).
/// params and tokens are device arrays of `rows` entries.
cudaError_t sample_rows(const void* logits, DType dtype, int64_t rows, int64_t vocab,
                        const RowSample* params, int32_t* tokens, cudaStream_t stream);

}  // namespace pagoda::cuda
