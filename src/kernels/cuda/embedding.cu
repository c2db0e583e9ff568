// Embedding: one block per token, a 16-byte copy per thread when the rows allow it.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.h"

namespace pagoda::cuda {
namespace {

template <typename V>
__global__ void embedding_kernel(const int32_t* ids, const V* table, int64_t first, int64_t vocab,
                                 int64_t row, V* out) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x;
  const int64_t id = int64_t{ids[t]} - first;  // the row of the table (first 0: the id)
  V* dst = out + t * row;
  if (id < 0 || id >= vocab) {
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) dst[i] = V{};
    return;
  }
  const V* src = table + static_cast<int64_t>(id) * row;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

cudaError_t embedding(const int32_t* ids, int64_t num_tokens, const void* table, int64_t vocab,
                      int64_t hidden, void* out, DType dtype, cudaStream_t stream) {
  return embedding_shard({ids, num_tokens, table, 0, vocab, hidden, out, dtype}, stream);
}

cudaError_t embedding_shard(const EmbeddingShard& p, cudaStream_t stream) {
  const int32_t* ids = p.ids;
  const int64_t num_tokens = p.num_tokens, hidden = p.hidden, first = p.first, vocab = p.rows;
  const void* table = p.table;
  void* out = p.out;
  const DType dtype = p.dtype;
  if (num_tokens <= 0 || hidden <= 0) return cudaSuccess;
  if (dtype != DType::kBF16 && dtype != DType::kF16) return cudaErrorInvalidValue;
  if (num_tokens > 0x7fffffff) return cudaErrorInvalidValue;
  const auto blocks = static_cast<unsigned>(num_tokens);
  // The copy is type-blind: 16-byte words when rows and pointers allow, else 2-byte words.
  if (hidden % 8 == 0 && aligned16(table) && aligned16(out)) {
    const int64_t row = hidden / 8;
    const int threads = static_cast<int>(std::min<int64_t>(256, (row + 31) / 32 * 32));
    launch_kernel(embedding_kernel<uint4>, blocks, threads, 0, stream, ids,
                  static_cast<const uint4*>(table), first, vocab, row, static_cast<uint4*>(out));
  } else {
    const int threads = static_cast<int>(std::min<int64_t>(256, (hidden + 31) / 32 * 32));
    launch_kernel(embedding_kernel<uint16_t>, blocks, threads, 0, stream, ids,
                  static_cast<const uint16_t*>(table), first, vocab, hidden,
                  static_cast<uint16_t*>(out));
  }
  return cudaGetLastError();
}

}  // namespace pagoda::cuda
