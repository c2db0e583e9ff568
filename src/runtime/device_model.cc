#include "runtime/device_model.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/status.h"
#ifdef PAGODA_HAVE_CUDA
#include "runtime/cuda/cuda_decoder_model.h"
#endif

namespace pagoda {

bool cuda_available() {
#ifdef PAGODA_HAVE_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

GpuPlacement place_gpu_rank(int rank, int world, int device_count, bool have_nccl) {
  PAGODA_CHECK(world >= 1 && rank >= 0 && rank < world && device_count >= 1,
               "rank {} of {} on {} GPUs", rank, world, device_count);
  GpuPlacement p;
  p.device = rank % device_count;
  if (world == 1) return p;
  // Ranks d, d + n, d + 2n, ... below world share GPU d.
  p.ranks_on_device = (world - 1 - p.device) / device_count + 1;
  p.comm = world <= device_count && have_nccl ? GpuCommunicator::kNccl : GpuCommunicator::kStaged;
  return p;
}

namespace {

// Whether `device` ("auto", "cpu" or "cuda") means the GPU.
bool on_gpu(const std::string& device) {
  if (device != "auto" && device != "cpu" && device != "cuda") {
    throw InvalidArgument(fmt::format("--device '{}' must be auto, cpu or cuda", device));
  }
  return device == "cuda" || (device == "auto" && cuda_available());
}

}  // namespace

std::unique_ptr<Model> load_eagle_head_on_device(const std::string& dir,
                                                 const EagleHeadOptions& eagle,
                                                 const LoadOptions& options,
                                                 const std::string& device, ThreadPool& pool) {
  if (!on_gpu(device)) return load_eagle_head(dir, eagle, options, pool);
#ifdef PAGODA_HAVE_CUDA
  if (cuda_device_count() == 0) throw InvalidArgument("--device cuda: no CUDA GPU is visible");
  return load_cuda_eagle_head(open_eagle_head(dir, eagle, options), dir, options, /*device=*/0,
                              pool);
#else
  throw InvalidArgument("--device cuda: this pagoda was built without CUDA (PAGODA_CUDA=OFF)");
#endif
}

std::unique_ptr<Model> load_model_on_device(const std::string& model_dir,
                                            const LoadOptions& options, const std::string& device,
                                            ThreadPool& pool) {
  if (!on_gpu(device)) return load_model(model_dir, options, pool);
#ifdef PAGODA_HAVE_CUDA
  const int count = cuda_device_count();
  if (count == 0) throw InvalidArgument("--device cuda: no CUDA GPU is visible");
#ifdef PAGODA_HAVE_NCCL
  constexpr bool kHaveNccl = true;
#else
  constexpr bool kHaveNccl = false;
#endif
  const TensorParallel& tp = options.tensor_parallel;
  return load_cuda_model(model_dir, options, place_gpu_rank(tp.rank, tp.world, count, kHaveNccl),
                         pool);
#else
  throw InvalidArgument("--device cuda: this pagoda was built without CUDA (PAGODA_CUDA=OFF)");
#endif
}

double profile_run(Model& model, int64_t max_tokens, int max_num_seqs, int64_t max_model_len,
                   int block_size, int64_t input_hidden_width) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> ids, positions, query_start_loc{0}, seq_lens, logits_indices;
  int max_blocks = 0;
  for (int64_t left = std::max<int64_t>(1, max_tokens); left > 0;) {
    const auto n = static_cast<int32_t>(std::min(left, std::max<int64_t>(1, max_model_len)));
    for (int32_t i = 0; i < n; ++i) positions.push_back(i);
    query_start_loc.push_back(query_start_loc.back() + n);
    seq_lens.push_back(n);
    max_blocks = std::max(max_blocks, (n + block_size - 1) / block_size);
    left -= n;
  }
  // As many logits rows as a step may ask for (one per sequence), so that the logits buffers
  // reach their peak too: the last rows of the batch.
  const auto tokens = static_cast<int32_t>(positions.size());
  const int32_t rows = std::min(tokens, std::max(1, max_num_seqs));
  for (int32_t r = tokens - rows; r < tokens; ++r) logits_indices.push_back(r);
  ids.assign(positions.size(), 0);
  const std::vector<int32_t> tables(seq_lens.size() * static_cast<size_t>(max_blocks), 0);
  const std::vector<int64_t> slots(positions.size(), -1);
  ForwardBatch batch{ids,    positions,  query_start_loc, seq_lens,
                     tables, max_blocks, slots,           logits_indices};
  const std::vector<float> hidden(positions.size() * static_cast<size_t>(input_hidden_width), 0.0f);
  batch.input_hidden = hidden;
  batch.input_hidden_width = input_hidden_width;
  (void)model.forward(batch);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int capture_decode_graphs(Model& model, int max_num_seqs, std::span<const int32_t> hidden_layers) {
  // Largest first (as vLLM captures them): sequences of one token at position 0 that read the
  // null block and write no KV, drawn greedily on the device (no logits copy).
  const std::vector<int> sizes = model.decode_graph_sizes(max_num_seqs);
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    const auto n = static_cast<size_t>(*it);
    const std::vector<int32_t> zeros(n, 0), ones(n, 1);
    std::vector<int32_t> query_start_loc(n + 1), rows(n);
    for (size_t i = 0; i <= n; ++i) query_start_loc[i] = static_cast<int32_t>(i);
    for (size_t i = 0; i < n; ++i) rows[i] = static_cast<int32_t>(i);
    const std::vector<int64_t> slots(n, -1);
    std::vector<DeviceDraw> draws(n);
    for (DeviceDraw& d : draws) d.temperature = 0.0f;
    std::vector<int32_t> tokens(n, -1);
    std::vector<DrawnLogprobs> logprobs(n);
    // ids 0, positions 0, one key each, block table [0].
    ForwardBatch decode{zeros, zeros, query_start_loc, ones, zeros, 1, slots, rows};
    decode.hidden_layers = hidden_layers;
    decode.host_hidden_layers = 0;
    (void)model.forward_sample(decode, draws, tokens, logprobs);
  }
  return static_cast<int>(sizes.size());
}

}  // namespace pagoda
