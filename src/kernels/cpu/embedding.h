#pragma once
// Token embedding lookup.
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagoda::cpu {

/// out[t, :] = float(table[ids[t], :]). table: [vocab, hidden] in dtype (f32, bf16, f16), read in
/// place. Ids are checked by the caller.
void embedding(const int32_t* ids, int64_t num_tokens, const void* table, DType dtype,
               int64_t hidden, float* out, ThreadPool& pool);

}  // namespace pagoda::cpu
