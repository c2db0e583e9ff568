// Model::forward_chain's default: the passes one by one through forward_sample, each pass's
// chained ids filled in on the host from the previous pass's drawn tokens.
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace pagoda {

void Model::forward_chain(std::span<const ChainedPass> passes, std::span<int32_t> tokens) {
  size_t total = 0;
  for (const ChainedPass& p : passes) total += p.draws.size();
  PAGODA_CHECK(tokens.size() == total, "forward_chain: {} token slots for {} rows", tokens.size(),
               total);
  std::vector<int32_t> ids;
  std::vector<DrawnLogprobs> logprobs;
  // tokens[offset, offset + rows) are pass p's; prev the previous pass's [prev_offset, offset).
  size_t offset = 0, prev_offset = 0;
  for (size_t p = 0; p < passes.size(); ++p) {
    const ChainedPass& pass = passes[p];
    ForwardBatch b = pass.batch;
    PAGODA_CHECK(pass.draws.size() == b.logits_indices.size(),
                 "forward_chain: pass {} has {} draws for {} rows", p, pass.draws.size(),
                 b.logits_indices.size());
    if (!pass.id_rows.empty()) {
      PAGODA_CHECK(p > 0 && pass.id_rows.size() == b.token_ids.size(),
                   "forward_chain: pass {} has {} id rows for {} tokens", p, pass.id_rows.size(),
                   b.token_ids.size());
      ids.assign(b.token_ids.begin(), b.token_ids.end());
      for (size_t t = 0; t < ids.size(); ++t) {
        const int32_t r = pass.id_rows[t];
        if (r < 0) continue;
        PAGODA_CHECK(prev_offset + static_cast<size_t>(r) < offset,
                     "forward_chain: pass {} reads row {} of {}", p, r, offset - prev_offset);
        ids[t] = tokens[prev_offset + static_cast<size_t>(r)];
      }
      b.token_ids = ids;
    }
    DeviceHidden previous;
    if (pass.hidden_from_previous) {
      const std::optional<DeviceHidden> kept = device_hidden_states();
      PAGODA_CHECK(p > 0 && kept.has_value(),
                   "forward_chain: pass {} reads hidden states its model did not keep", p);
      previous = *kept;
      b.input_hidden_device = &previous;
    }
    const std::span<int32_t> drawn = tokens.subspan(offset, pass.draws.size());
    logprobs.assign(pass.draws.size(), DrawnLogprobs{});
    (void)forward_sample(b, pass.draws, drawn, logprobs);
    for (size_t r = 0; r < drawn.size(); ++r)
      PAGODA_CHECK(drawn[r] >= 0, "forward_chain: pass {} row {} was not drawn", p, r);
    prev_offset = offset;
    offset += pass.draws.size();
  }
}

}  // namespace pagoda
