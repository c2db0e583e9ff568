#include "runtime/eagle_proposer.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"
#include "runtime/draft_proposer.h"

namespace pagoda {

EagleProposer::EagleProposer(Model& head, int block_size, int64_t target_hidden)
    : head_(head),
      block_size_(block_size),
      hidden_(head.definition().hidden_size),
      target_hidden_(target_hidden) {
  PAGODA_CHECK(head.definition().eagle.has_value(), "EagleProposer over a model without a head");
  target_layers_ = head.definition().eagle->target_layers;
  width_ = static_cast<int64_t>(target_layers_.size()) * target_hidden_;
}

void EagleProposer::add_token(Pass& pass, const std::vector<int32_t>& table, int32_t position,
                              int32_t token, std::span<const float> hidden) const {
  const auto block = static_cast<size_t>(position / block_size_);
  PAGODA_CHECK(block < table.size(), "EAGLE: position {} past a table of {} blocks", position,
               table.size());
  pass.ids.push_back(token);
  pass.positions.push_back(position);
  pass.slots.push_back(int64_t{table[block]} * block_size_ + position % block_size_);
  pass.hidden.insert(pass.hidden.end(), hidden.begin(), hidden.end());
}

void EagleProposer::end_sequence(Pass& pass, const std::vector<int32_t>& table, int32_t end) {
  pass.query_start.push_back(static_cast<int32_t>(pass.ids.size()));
  pass.seq_lens.push_back(end);
  pass.tables.push_back(table);
  pass.max_blocks = std::max(pass.max_blocks, static_cast<int>(table.size()));
}

std::span<float> EagleProposer::run(Pass& pass, int64_t width) {
  // Tables padded to [seqs, max_blocks] with the null block. Example: [7, 9] and [4] with
  // max_blocks 2 become [7, 9, 4, 0].
  pass.flat_tables.clear();
  for (const std::vector<int32_t>& t : pass.tables) {
    pass.flat_tables.insert(pass.flat_tables.end(), t.begin(), t.end());
    pass.flat_tables.resize(
        pass.flat_tables.size() + static_cast<size_t>(pass.max_blocks) - t.size(), 0);
  }
  static constexpr int32_t kOutputLayer = 0;  // the residual stream after the head's layer: g
  ForwardBatch batch{pass.ids,         pass.positions,  pass.query_start, pass.seq_lens,
                     pass.flat_tables, pass.max_blocks, pass.slots,       pass.rows};
  batch.hidden_layers = std::span<const int32_t>(&kOutputLayer, 1);
  batch.input_hidden = pass.hidden;
  batch.input_hidden_width = width;
  pass.drawn.assign(pass.rows.size(), -1);
  std::vector<DrawnLogprobs> unused(pass.rows.size());
  const std::span<float> logits = head_.forward_sample(batch, pass.draws, pass.drawn, unused);
  for (size_t row = 0; row < pass.drawn.size(); ++row) {
    PAGODA_CHECK(pass.drawn[row] >= 0 || !logits.empty(),
                 "EAGLE: row {} neither drawn nor returned", row);
  }
  const std::span<float> g = head_.hidden_states();  // [1, T, hidden_]
  outputs_.resize(pass.rows.size() * static_cast<size_t>(hidden_));
  for (size_t r = 0; r < pass.rows.size(); ++r) {
    std::memcpy(outputs_.data() + r * static_cast<size_t>(hidden_),
                g.data() + static_cast<size_t>(pass.rows[r]) * static_cast<size_t>(hidden_),
                static_cast<size_t>(hidden_) * sizeof(float));
  }
  return logits;
}

void EagleProposer::propose(StepPlan& plan,
                            const std::unordered_map<uint64_t, std::vector<int32_t>>& tables,
                            std::span<SequenceResult> results) {
  PAGODA_CHECK(results.size() == plan.seqs.size(), "EAGLE: {} results for {} sequences",
               results.size(), plan.seqs.size());
  const auto vocab = static_cast<size_t>(head_.config().vocab_size);
  const auto width = static_cast<size_t>(width_);
  // The sequences that propose: plan index, position n of the step's first token, k.
  struct Active {
    size_t i;
    int32_t n;
    int32_t k;
  };
  std::vector<Active> active;
  Pass first;
  const std::vector<float> zeros(width, 0.0f);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const PlannedSequence& s = plan.seqs[i];
    PAGODA_CHECK(!s.propose || s.num_spec > 0, "sequence {}: propose without drafts", s.id);
    const auto [it, inserted] = seqs_.try_emplace(s.id);
    SeqState& st = it->second;
    const int32_t n = s.num_computed;
    if (inserted || s.fresh || st.computed > n) st = SeqState{n, {}, {}};
    // Pending hidden states past n belong to rejected drafts.
    const auto keep = static_cast<size_t>(n - st.computed);
    if (st.tokens.size() > keep) {
      st.tokens.resize(keep);
      st.hidden.resize(keep * width);
    }
    if (st.tokens.size() < keep) {
      // Positions the head has no hidden state for (never observed): it trusts its KV there.
      st = SeqState{n, {}, {}};
    }
    const std::vector<int32_t>& table = tables.at(s.id);
    // Position p reads the token at p + 1: the pending token after it, or the step's first.
    for (size_t j = 0; j < st.tokens.size(); ++j) {
      const int32_t next = j + 1 < st.tokens.size() ? st.tokens[j + 1] : s.tokens[0];
      add_token(first, table, st.computed + static_cast<int32_t>(j), next,
                std::span<const float>(st.hidden).subspan(j * width, width));
    }
    if (s.propose && st.tokens.empty()) {
      // No hidden state for n - 1 (a sequence proposing right after cached blocks): zeros, so
      // the head still drafts; its KV at n - 1 is rewritten once the target's state exists.
      PAGODA_CHECK(n > 0, "sequence {}: proposing at position 0", s.id);
      add_token(first, table, n - 1, s.tokens[0], zeros);
      st.computed = n - 1;
    }
    const bool rows = st.computed < n;
    if (rows) {
      if (s.propose) {
        first.rows.push_back(static_cast<int32_t>(first.ids.size()) - 1);
        first.draws.push_back(DraftProposer::device_draw(s.draft_draw));
      }
      end_sequence(first, table, n);
    }
    st.computed = n;
    st.tokens.clear();
    st.hidden.clear();
    if (s.propose) active.push_back({i, n, s.num_spec});
  }
  int32_t max_k = 0;
  for (const Active& a : active) {
    max_k = std::max(max_k, a.k);
    DraftProposer::size_results(plan.seqs[a.i], a.k, vocab, results[a.i]);
  }
  if (first.ids.empty()) return;
  // Pass j (1-based) draws draft j of each sequence that still needs one; pass 1 is the catch-up.
  std::span<float> logits = run(first, width_);
  const Pass* last = &first;
  Pass pass;
  std::vector<size_t> in_pass;  // indices into active, in row order
  for (size_t a = 0; a < active.size(); ++a) in_pass.push_back(a);
  for (int32_t j = 1;; ++j) {
    PAGODA_CHECK(last->drawn.size() == in_pass.size() &&
                     (logits.empty() || logits.size() == in_pass.size() * vocab),
                 "EAGLE: {} logits and {} rows for {} sequences", logits.size(), last->drawn.size(),
                 in_pass.size());
    for (size_t row = 0; row < in_pass.size(); ++row) {
      const Active& a = active[in_pass[row]];
      PlannedSequence& s = plan.seqs[a.i];
      SequenceResult& r = results[a.i];
      const std::span<float> row_logits =
          logits.empty() ? logits : logits.subspan(row * vocab, vocab);
      DraftProposer::place_draft(row_logits, last->drawn[row], static_cast<size_t>(j - 1), s, r);
    }
    if (j >= max_k) break;
    // Draft j, the token at n + j, is the input of position n + j - 1, with the head's output of
    // the row before it.
    pass = Pass{};
    std::vector<size_t> next;
    const std::vector<float> g = outputs_;  // [in_pass rows, hidden_]
    for (size_t row = 0; row < in_pass.size(); ++row) {
      const Active& act = active[in_pass[row]];
      if (act.k <= j) continue;
      const std::vector<int32_t>& table = tables.at(plan.seqs[act.i].id);
      const int32_t position = act.n + j - 1;
      add_token(pass, table, position, results[act.i].drafts[static_cast<size_t>(j - 1)],
                std::span<const float>(g).subspan(row * static_cast<size_t>(hidden_),
                                                  static_cast<size_t>(hidden_)));
      pass.rows.push_back(static_cast<int32_t>(pass.ids.size()) - 1);
      pass.draws.push_back(DraftProposer::device_draw(plan.seqs[act.i].draft_draw));
      end_sequence(pass, table, position + 1);
      next.push_back(in_pass[row]);
    }
    in_pass = std::move(next);
    logits = run(pass, hidden_);
    last = &pass;
  }
}

void EagleProposer::observe(const StepPlan& plan, std::span<const float> hidden) {
  size_t total = 0;
  for (const PlannedSequence& s : plan.seqs) total += s.tokens.size();
  const auto layers = target_layers_.size();
  const auto th = static_cast<size_t>(target_hidden_);
  PAGODA_CHECK(hidden.size() == layers * total * th,
               "EAGLE: {} hidden floats for {} layers of {} tokens", hidden.size(), layers, total);
  // Token t's row is the concatenation of hidden[l][t] over the layers, [width_]. Example: 3
  // layers, 10 tokens, hidden 64: token 4's row is the floats at (0 * 10 + 4) * 64, (1 * 10 + 4) *
  // 64 and (2 * 10 + 4) * 64, 64 each.
  size_t t = 0;
  for (const PlannedSequence& s : plan.seqs) {
    const auto it = seqs_.find(s.id);
    if (it == seqs_.end()) {
      t += s.tokens.size();
      continue;
    }
    SeqState& st = it->second;
    for (const int32_t token : s.tokens) {
      st.tokens.push_back(token);
      for (size_t l = 0; l < layers; ++l) {
        const float* row = hidden.data() + (l * total + t) * th;
        st.hidden.insert(st.hidden.end(), row, row + th);
      }
      ++t;
    }
  }
}

}  // namespace pagoda
