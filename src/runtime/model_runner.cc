#include "runtime/model_runner.h"

#include <algorithm>
#include <exception>

#include "core/status.h"

namespace pagoda {

RowDraw RowDraw::from(const DeviceDraw& d) {
  RowDraw r;
  r.temperature = d.temperature;
  r.seed = d.seed;
  r.counter = d.counter;
  r.top_k = d.top_k;
  r.top_p = d.top_p;
  r.min_p = d.min_p;
  r.repetition_penalty = d.repetition_penalty;
  r.presence_penalty = d.presence_penalty;
  r.frequency_penalty = d.frequency_penalty;
  r.num_logprobs = d.num_logprobs;
  r.penalty_tokens.assign(d.penalty_tokens.begin(), d.penalty_tokens.end());
  r.logit_bias.assign(d.logit_bias.begin(), d.logit_bias.end());
  r.masked.assign(d.masked.begin(), d.masked.end());
  r.allowed.assign(d.allowed.begin(), d.allowed.end());
  return r;
}

DeviceDraw RowDraw::view() const {
  DeviceDraw d;
  d.temperature = temperature;
  d.seed = seed;
  d.counter = counter;
  d.top_k = top_k;
  d.top_p = top_p;
  d.min_p = min_p;
  d.repetition_penalty = repetition_penalty;
  d.presence_penalty = presence_penalty;
  d.frequency_penalty = frequency_penalty;
  d.penalty_tokens = penalty_tokens;
  d.logit_bias = logit_bias;
  d.masked = masked;
  d.allowed = allowed;
  d.num_logprobs = num_logprobs;
  return d;
}

ModelRunner::ModelRunner(Model& model, int block_size, Model* draft,
                         std::optional<int32_t> mask_token)
    : model_(model), block_size_(block_size) {
  if (draft == nullptr) return;
  if (draft->definition().eagle) {
    eagle_.emplace(*draft, block_size, model);
  } else {
    drafter_.emplace(*draft, block_size, mask_token);
  }
}

std::span<const int32_t> ModelRunner::block_table(uint64_t id) const {
  const auto it = tables_.find(id);
  return it == tables_.end() ? std::span<const int32_t>{} : std::span<const int32_t>(it->second);
}

void ModelRunner::launch(StepPlan plan) {
  PAGODA_CHECK(!in_flight_, "ModelRunner::launch while a step is in flight");
  // Check the whole plan before changing any state: a bad plan fails alone.
  for (const PlannedSequence& s : plan.seqs) {
    const auto it = tables_.find(s.id);
    const size_t held = it == tables_.end() ? 0 : it->second.size();
    PAGODA_CHECK(!s.tokens.empty() && s.num_computed >= 0 && s.num_spec >= 0 &&
                     s.num_spec < static_cast<int32_t>(s.tokens.size()) &&
                     s.rows.size() <= s.tokens.size(),
                 "sequence {}: {} tokens ({} drafts) with {} rows from position {}", s.id,
                 s.tokens.size(), s.num_spec, s.rows.size(), s.num_computed);
    const bool drafts = drafter_ || eagle_;
    PAGODA_CHECK(!s.propose || (drafts && s.num_spec > 0),
                 "sequence {}: draft-model drafts asked for {}", s.id,
                 drafts ? "without drafts" : "but there is no draft model");
    PAGODA_CHECK(s.block_table_start >= 0 && static_cast<size_t>(s.block_table_start) <= held,
                 "sequence {}: block table kept to {} of the {} blocks held", s.id,
                 s.block_table_start, held);
    const int64_t end = int64_t{s.num_computed} + static_cast<int64_t>(s.tokens.size());
    const int64_t blocks = s.block_table_start + static_cast<int64_t>(s.new_blocks.size());
    PAGODA_CHECK(blocks * block_size_ >= end, "sequence {}: {} blocks for {} tokens", s.id, blocks,
                 end);
  }
  for (const uint64_t id : plan.finished) {
    tables_.erase(id);
    if (drafter_) drafter_->forget(id);
    if (eagle_) eagle_->forget(id);
  }
  if (!plan.block_copies.empty()) {
    model_.copy_kv_blocks(plan.block_copies);
    if (drafter_) drafter_->copy_blocks(plan.block_copies);
    if (eagle_) eagle_->copy_blocks(plan.block_copies);
  }

  ids_.clear();
  positions_.clear();
  query_start_.assign(1, 0);
  seq_lens_.clear();
  tables_flat_.clear();
  logits_rows_.clear();
  slots_.clear();
  draws_.clear();
  StepResult out;
  out.vocab = model_.config().vocab_size;
  out.seqs.resize(plan.seqs.size());

  int max_blocks = 1;
  for (const PlannedSequence& s : plan.seqs) {
    std::vector<int32_t>& table = tables_[s.id];
    table.resize(static_cast<size_t>(s.block_table_start));
    table.insert(table.end(), s.new_blocks.begin(), s.new_blocks.end());
    max_blocks = std::max(max_blocks, static_cast<int>(table.size()));
  }
  // The draft model sees the step's tokens and fills the placeholders of proposing sequences.
  if (drafter_) drafter_->propose(plan, tables_, out.seqs);
  if (eagle_) eagle_->propose(plan, tables_, out.seqs);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const PlannedSequence& s = plan.seqs[i];
    const std::vector<int32_t>& table = tables_.at(s.id);
    const auto num_new = static_cast<int32_t>(s.tokens.size());
    const auto first_row = num_new - static_cast<int32_t>(s.rows.size());
    SequenceResult& r = out.seqs[i];
    r.first_row = static_cast<int32_t>(logits_rows_.size());
    r.tokens.assign(s.rows.size(), -1);
    r.logprobs.resize(s.rows.size());
    for (int32_t j = 0; j < num_new; ++j) {
      const int32_t p = s.num_computed + j;
      const auto row = static_cast<int32_t>(ids_.size());
      ids_.push_back(s.tokens[static_cast<size_t>(j)]);
      positions_.push_back(p);
      slots_.push_back(int64_t{table[static_cast<size_t>(p / block_size_)]} * block_size_ +
                       p % block_size_);
      if (j >= first_row) {
        logits_rows_.push_back(row);
        draws_.push_back(s.rows[static_cast<size_t>(j - first_row)].view());
      }
    }
    query_start_.push_back(static_cast<int32_t>(ids_.size()));
    seq_lens_.push_back(s.num_computed + num_new);
    tables_flat_.insert(tables_flat_.end(), table.begin(), table.end());
    tables_flat_.resize(static_cast<size_t>(max_blocks) * (i + 1), 0);  // 0: the null block
  }
  max_blocks_ = max_blocks;
  hidden_layers_.assign(plan.hidden_layers.begin(), plan.hidden_layers.end());
  plan_hidden_layers_ = hidden_layers_.size();
  if (eagle_) {
    const std::vector<int32_t>& layers = eagle_->target_layers();
    hidden_layers_.insert(hidden_layers_.end(), layers.begin(), layers.end());
  }
  plan_ = std::move(plan);  // draws_ view its rows until wait()
  pending_ = std::move(out);
  // Late rows (StepPlan::fill_late): filled once the forward pass is queued, then viewed again
  // (draws_ holds the rows of every sequence in plan order, as built above).
  // An exception there must not leave the model's step open: it is kept, the step drained, and
  // rethrown.
  std::exception_ptr late_error;
  auto fill_late = [this, &late_error] {
    if (!plan_.fill_late) return;
    try {
      auto fill = std::move(plan_.fill_late);
      plan_.fill_late = nullptr;
      fill(plan_);
    } catch (...) {
      late_error = std::current_exception();
      return;
    }
    size_t k = 0;
    for (const PlannedSequence& s : plan_.seqs) {
      for (const RowDraw& row : s.rows) draws_[k++].allowed = row.allowed;
    }
  };
  synchronous_ = !model_.start_step(batch(), draws_, fill_late);
  fill_late();  // a synchronous model computes in wait(); nothing to do if it was called
  in_flight_ = true;
  if (late_error) {
    (void)wait();
    std::rethrow_exception(late_error);
  }
}

ForwardBatch ModelRunner::batch() const {
  ForwardBatch b{ids_,         positions_,  query_start_, seq_lens_,
                 tables_flat_, max_blocks_, slots_,       logits_rows_};
  b.hidden_layers = hidden_layers_;
  // A head that reads the target's states on the device: only the plan's layers come back.
  if (eagle_ && eagle_->on_device()) b.host_hidden_layers = static_cast<int>(plan_hidden_layers_);
  return b;
}

StepResult ModelRunner::wait() {
  PAGODA_CHECK(in_flight_, "ModelRunner::wait without launch");
  in_flight_ = false;
  StepResult out = std::move(pending_);
  std::vector<int32_t> tokens(logits_rows_.size(), -1);
  std::vector<DrawnLogprobs> logprobs(logits_rows_.size());
  out.logits = synchronous_ ? model_.forward_sample(batch(), draws_, tokens, logprobs)
                            : model_.finish_step(tokens, logprobs);
  PAGODA_CHECK(out.logits.empty() ||
                   out.logits.size() == logits_rows_.size() * static_cast<size_t>(out.vocab),
               "the model returned {} logits for {} rows", out.logits.size(), logits_rows_.size());
  for (SequenceResult& r : out.seqs) {
    for (size_t j = 0; j < r.tokens.size(); ++j) {
      const size_t row = static_cast<size_t>(r.first_row) + j;
      r.tokens[j] = tokens[row];
      r.logprobs[j] = std::move(logprobs[row]);
    }
  }
  // [hidden_layers_, T, hidden]: the plan's layers first, then the EAGLE head's (on the host, or
  // left on the device for the head to gather).
  const std::span<float> hidden = model_.hidden_states();
  const size_t per_layer = ids_.size() * static_cast<size_t>(model_.config().hidden_size);
  if (eagle_ && eagle_->on_device()) {
    eagle_->observe(plan_, model_.device_hidden_states().value().from_layer(
                               static_cast<int>(plan_hidden_layers_)));
  } else if (eagle_) {
    eagle_->observe(plan_, hidden.subspan(plan_hidden_layers_ * per_layer));
  }
  out.hidden_states = hidden.first(plan_hidden_layers_ * per_layer);
  return out;
}

}  // namespace pagoda
