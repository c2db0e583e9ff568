// CudaDecoderModel::forward_chain: a drafter's greedy passes queued back to back on the model's
// stream, with no host round trip between them.
//
// How it works. Each pass is an ordinary step (start_step: inputs staged, kernels or a decode
// graph, the device sampler), with three differences:
//  - its rows are drawn by a sampler of its own (chain_samplers_[p]), so each pass's drawn tokens
//    stay on the device, and its pinned staging is not rewritten while a copy from it is queued;
//  - after its inputs are uploaded, the ids of its chained tokens are overwritten on the device
//    from the previous pass's drawn tokens (cuda::gather_ids over ChainedPass::id_rows): pass
//    p + 1's inputs are known on the host except those ids, so the host builds and queues it
//    while pass p still runs;
//  - the host does not wait for it: the next pass is queued at once. The step-input staging area
//    is shared, so stage_inputs waits for the previous upload from it (an event) before writing
//    it again: the host stays at most a pass or two ahead of the device.
// One synchronisation after the last pass, then every pass's tokens are read from its sampler's
// pinned area. Worked example, k = 3 at batch 1: pass 0 (the catch-up) draws d1 into sampler 0;
// pass 1 gathers ids[0] = sampler 0's row r (the catch-up's last row) and draws d2 into sampler
// 1; pass 2 gathers ids[0] = sampler 1's row 0 and draws d3; the host then reads d1, d2, d3 once.
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_decoder.h"

namespace pagoda {

void CudaDecoderModel::forward_chain(std::span<const ChainedPass> passes,
                                     std::span<int32_t> tokens) {
  PAGODA_CHECK(chains_on_device(), "forward_chain on the device without device sampling");
  size_t total = 0;
  for (const ChainedPass& p : passes) total += p.draws.size();
  PAGODA_CHECK(tokens.size() == total, "forward_chain: {} token slots for {} rows", tokens.size(),
               total);
  while (chain_samplers_.size() < passes.size())
    chain_samplers_.push_back(std::make_unique<DeviceSampler>());
  // However the chain ends, no pass is left open and nothing queued still reads host memory.
  struct Reset {
    CudaDecoderModel* m;
    ~Reset() {
      m->chain_ = ChainLink{};
      m->pending_ = PendingStep{};
      (void)cudaStreamSynchronize(m->stream_);
    }
  } reset{this};
  DeviceHidden previous_hidden;
  for (size_t p = 0; p < passes.size(); ++p) {
    const ChainedPass& pass = passes[p];
    ForwardBatch b = pass.batch;
    PAGODA_CHECK(pass.draws.size() == b.logits_indices.size(),
                 "forward_chain: pass {} has {} draws for {} rows", p, pass.draws.size(),
                 b.logits_indices.size());
    for (const DeviceDraw& d : pass.draws) {
      PAGODA_CHECK(d.temperature >= 0, "forward_chain: pass {} has a row that is not drawn", p);
    }
    // Hidden states to the host would share one pinned area between queued passes.
    PAGODA_CHECK(b.hidden_layers.empty() || b.host_hidden_layers == 0,
                 "forward_chain: pass {} returns hidden states to the host", p);
    if (!pass.id_rows.empty()) {
      PAGODA_CHECK(p > 0 && pass.id_rows.size() == b.token_ids.size(),
                   "forward_chain: pass {} has {} id rows for {} tokens", p, pass.id_rows.size(),
                   b.token_ids.size());
      const auto previous_rows = static_cast<int32_t>(passes[p - 1].draws.size());
      for (const int32_t r : pass.id_rows) {
        PAGODA_CHECK(r < previous_rows, "forward_chain: pass {} reads row {} of {}", p, r,
                     previous_rows);
      }
    }
    if (pass.hidden_from_previous) {
      PAGODA_CHECK(p > 0 && !hidden_layers_.empty(),
                   "forward_chain: pass {} reads hidden states the previous pass did not keep", p);
      previous_hidden = *device_hidden_states();
      b.input_hidden_device = &previous_hidden;
    }
    chain_.sampler = chain_samplers_[p].get();
    chain_.id_rows = pass.id_rows;
    PAGODA_CHECK(start_step(b, pass.draws), "start_step failed");
    PAGODA_CHECK(pending_.logits_elems == 0 && (pending_.rows == 0 || pending_.sampled),
                 "forward_chain: pass {} left rows undrawn", p);
    pending_ = PendingStep{};  // queued: the next pass follows it on the stream
    chain_.previous = chain_samplers_[p]->device_tokens();
  }
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  size_t offset = 0;
  for (size_t p = 0; p < passes.size(); ++p) {
    const size_t rows = passes[p].draws.size();
    if (rows > 0) chain_samplers_[p]->collect(passes[p].draws, tokens.subspan(offset, rows), {});
    offset += rows;
  }
}

}  // namespace pagoda
