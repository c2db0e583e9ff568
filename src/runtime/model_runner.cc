#include "runtime/model_runner.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda {

ModelRunner::ModelRunner(Model& model, int block_size) : model_(model), block_size_(block_size) {}

void ModelRunner::launch(std::span<const SequenceStep> steps,
                         std::span<const kv::BlockCopy> copies) {
  PAGODA_CHECK(!in_flight_, "ModelRunner::launch while a step is in flight");
  if (!copies.empty()) {
    std::vector<std::pair<int32_t, int32_t>> pairs;
    for (const kv::BlockCopy& c : copies) pairs.emplace_back(c.src, c.dst);
    model_.copy_kv_blocks(pairs);
  }
  const int block_size = block_size_;
  ids_.clear();
  positions_.clear();
  query_start_.assign(1, 0);
  seq_lens_.clear();
  tables_.clear();
  logits_rows_.clear();
  slots_.clear();
  draws_.clear();
  StepLogits out;
  out.vocab = model_.config().vocab_size;
  out.sample_row.assign(steps.size(), -1);
  out.first_token_row.assign(steps.size(), -1);

  int max_blocks = 1;
  for (const SequenceStep& s : steps)
    max_blocks = std::max(max_blocks, static_cast<int>(s.block_table.size()));
  for (size_t i = 0; i < steps.size(); ++i) {
    const SequenceStep& s = steps[i];
    const int end = s.num_computed + s.num_new;
    PAGODA_CHECK(s.num_new > 0 && end <= static_cast<int>(s.token_ids.size()),
                 "step of {} tokens from {} of {}", s.num_new, s.num_computed, s.token_ids.size());
    PAGODA_CHECK(static_cast<int64_t>(s.block_table.size()) * block_size >= end,
                 "block table of {} blocks for {} tokens", s.block_table.size(), end);
    if (s.prompt_logits) out.first_token_row[i] = static_cast<int>(logits_rows_.size());
    for (int p = s.num_computed; p < end; ++p) {
      const auto row = static_cast<int32_t>(ids_.size());
      ids_.push_back(s.token_ids[static_cast<size_t>(p)]);
      positions_.push_back(p);
      slots_.push_back(static_cast<int64_t>(s.block_table[static_cast<size_t>(p / block_size)]) *
                           block_size +
                       p % block_size);
      if (s.prompt_logits) {
        logits_rows_.push_back(row);
        draws_.emplace_back();  // prompt rows are returned as logits
      }
    }
    if (s.sample) {
      if (!s.prompt_logits) {
        logits_rows_.push_back(static_cast<int32_t>(ids_.size()) - 1);
        draws_.push_back(s.draw);
      } else {
        draws_.back() = s.draw;  // the last prompt row is also the sampled one
      }
      out.sample_row[i] = static_cast<int>(logits_rows_.size()) - 1;
    }
    query_start_.push_back(static_cast<int32_t>(ids_.size()));
    seq_lens_.push_back(end);
    tables_.insert(tables_.end(), s.block_table.begin(), s.block_table.end());
    tables_.resize(static_cast<size_t>(max_blocks) * (i + 1), kv::kNullBlockId);
  }
  max_blocks_ = max_blocks;
  out.tokens.assign(logits_rows_.size(), -1);
  out.logprobs.resize(logits_rows_.size());
  synchronous_ = !model_.start_step(batch(), draws_);
  pending_ = std::move(out);
  in_flight_ = true;
}

ForwardBatch ModelRunner::batch() const {
  return ForwardBatch{ids_,    positions_,  query_start_, seq_lens_,
                      tables_, max_blocks_, slots_,       logits_rows_};
}

StepLogits ModelRunner::wait() {
  PAGODA_CHECK(in_flight_, "ModelRunner::wait without launch");
  in_flight_ = false;
  StepLogits out = std::move(pending_);
  out.rows = synchronous_ ? model_.forward_sample(batch(), draws_, out.tokens, out.logprobs)
                          : model_.finish_step(out.tokens, out.logprobs);
  PAGODA_CHECK(
      out.rows.empty() || out.rows.size() == logits_rows_.size() * static_cast<size_t>(out.vocab),
      "the model returned {} logits for {} rows", out.rows.size(), logits_rows_.size());
  return out;
}

}  // namespace pagoda
