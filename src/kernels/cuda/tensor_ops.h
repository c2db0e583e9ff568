#pragma once
// Whole-tensor utilities the GPU runtime needs around the model kernels: dtype conversion, the
// random fill of --load-format dummy, and row and column gathers.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace pagoda::cuda {

/// dst[i] = src[i] converted between f32, bf16 and f16 (round to nearest even). Any pair; may not
/// alias unless the dtypes are equal.
cudaError_t convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t count,
                    cudaStream_t stream);

/// dst[i] = offset + scale * u(i), u uniform in [-1, 1) from a counter-based hash of (seed, i):
/// the same values as the CPU dummy weights (model/dummy_weights.cc), whatever the launch shape.
/// dtype bf16, f16, f32, f8e4m3 (FP8 dummy weights, rounded to nearest even and saturated) or i8
/// (INT8 dummy weights: rounded half to even in double, clamped to +-127).
cudaError_t fill_uniform(void* dst, DType dtype, int64_t count, uint64_t seed, float offset,
                         float scale, cudaStream_t stream);

/// x[i] = scale * x[i] + offset in place (dtype f32, bf16 or f16; computed in fp32, rounded once):
/// the norm weights' offsets of Gemma (1 + w) and its embedding scale.
cudaError_t affine(void* x, DType dtype, int64_t count, float scale, float offset,
                   cudaStream_t stream);

/// out[i] = a[i] + b[i] (dtype bf16 or f16, computed in fp32, rounded once); out may alias a or b.
cudaError_t add(const void* a, const void* b, void* out, DType dtype, int64_t count,
                cudaStream_t stream);

/// x[i] = cap * tanh(x[i] / cap) in place (computed in fp32), cap > 0: Gemma-2's logit soft-cap.
cudaError_t softcap(void* x, DType dtype, int64_t count, float cap, cudaStream_t stream);

/// dst[r, :] = src[rows[r], :] for r in [0, num_rows); rows of row_bytes bytes (a multiple of 16
/// when both pointers are 16-byte aligned, any size otherwise). rows: device int32.
cudaError_t gather_rows(const void* src, const int32_t* rows, int64_t num_rows, int64_t row_bytes,
                        void* dst, cudaStream_t stream);

/// Rows of several layers gathered side by side: dst[r] = concat over l in [0, layers) of
/// src[l * layer_bytes + rows[r] * row_bytes, + row_bytes), or row_bytes zeros per layer where
/// rows[r] < 0; dst [num_rows, layers * row_bytes]. An EAGLE head's input hidden states read
/// where the target left them ([layers, tokens, hidden]). Example: layers 3, row_bytes 8 (four
/// bf16), rows [4, -1]: dst row 0 is bytes [4*8, 5*8) of layers 0, 1 and 2 (24 bytes), row 1 is
/// 24 zero bytes. rows: device int32.
cudaError_t gather_layer_rows(const void* src, int layers, int64_t layer_bytes, int64_t row_bytes,
                              const int32_t* rows, int64_t num_rows, void* dst,
                              cudaStream_t stream);

/// ids[t] = src[rows[t]] where rows[t] >= 0 (else ids[t] is left), t in [0, n): a chained pass's
/// input ids from the previous pass's drawn tokens (Model::forward_chain). Example: src (drawn
/// tokens of the previous pass's 3 rows) [812, 90, 4401], rows [2, -1, 0], ids [0, 7, 0] become
/// [4401, 7, 812]. src, rows and ids: device int32.
cudaError_t gather_ids(const int32_t* src, const int32_t* rows, int64_t n, int32_t* ids,
                       cudaStream_t stream);

/// dst[r, c] = src[r, columns[c]] when columns[c] >= 0, else -inf, for r in [0, rows) and c in
/// [0, dst_cols); src [rows, src_cols], dst [rows, dst_cols], both in `dtype` (f32, bf16 or f16),
/// columns device int32 [dst_cols] with entries in [-1, src_cols). An EAGLE-3 head's logits over
/// its draft vocabulary placed at their target ids. Example: src row (a, b, c), columns
/// [0, 1, -1, -1, -1, 2, -1, -1] gives (a, b, -inf, -inf, -inf, c, -inf, -inf).
cudaError_t gather_columns(const void* src, int64_t rows, int64_t src_cols, const int32_t* columns,
                           int64_t dst_cols, void* dst, DType dtype, cudaStream_t stream);

}  // namespace pagoda::cuda
