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

std::unique_ptr<Model> load_model_on_device(const std::string& model_dir,
                                            const LoadOptions& options, const std::string& device,
                                            ThreadPool& pool) {
  if (device != "auto" && device != "cpu" && device != "cuda") {
    throw InvalidArgument(fmt::format("--device '{}' must be auto, cpu or cuda", device));
  }
  const bool gpu = device == "cuda" || (device == "auto" && cuda_available());
  if (!gpu) return load_model(model_dir, options, pool);
#ifdef PAGODA_HAVE_CUDA
  if (cuda_device_count() == 0) throw InvalidArgument("--device cuda: no CUDA GPU is visible");
  return load_cuda_model(model_dir, options, /*device=*/0, pool);
#else
  throw InvalidArgument("--device cuda: this pagoda was built without CUDA (PAGODA_CUDA=OFF)");
#endif
}

double warm_up(Model& model, int64_t max_tokens, int max_num_seqs, int64_t max_model_len,
               int block_size) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> ids, positions, query_start_loc{0}, seq_lens, logits_indices;
  int max_blocks = 0;
  for (int64_t left = std::max<int64_t>(1, max_tokens); left > 0;) {
    const auto n = static_cast<int32_t>(std::min(left, std::max<int64_t>(1, max_model_len)));
    for (int32_t i = 0; i < n; ++i) positions.push_back(i);
    query_start_loc.push_back(query_start_loc.back() + n);
    seq_lens.push_back(n);
    logits_indices.push_back(query_start_loc.back() - 1);
    max_blocks = std::max(max_blocks, (n + block_size - 1) / block_size);
    left -= n;
  }
  ids.assign(positions.size(), 0);
  const std::vector<int32_t> tables(seq_lens.size() * static_cast<size_t>(max_blocks), 0);
  const std::vector<int64_t> slots(positions.size(), -1);
  ForwardBatch batch{ids,    positions,  query_start_loc, seq_lens,
                     tables, max_blocks, slots,           logits_indices};
  (void)model.forward(batch);

  // The decode graphs, largest first (as vLLM captures them): sequences of one token at position
  // 0 that read the null block and write no KV, drawn greedily on the device (no logits copy).
  const std::vector<int> sizes = model.decode_graph_sizes(max_num_seqs);
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    const auto n = static_cast<size_t>(*it);
    ids.assign(n, 0);
    positions.assign(n, 0);
    seq_lens.assign(n, 1);
    query_start_loc.resize(n + 1);
    logits_indices.resize(n);
    for (size_t i = 0; i <= n; ++i) query_start_loc[i] = static_cast<int32_t>(i);
    for (size_t i = 0; i < n; ++i) logits_indices[i] = static_cast<int32_t>(i);
    const std::vector<int32_t> decode_tables(n, 0);
    const std::vector<int64_t> decode_slots(n, -1);
    std::vector<DeviceDraw> draws(n);
    for (DeviceDraw& d : draws) d.temperature = 0.0f;
    std::vector<int32_t> tokens(n, -1);
    std::vector<DrawnLogprobs> logprobs(n);
    const ForwardBatch decode{ids,           positions, query_start_loc, seq_lens,
                              decode_tables, 1,         decode_slots,    logits_indices};
    (void)model.forward_sample(decode, draws, tokens, logprobs);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace pagoda
