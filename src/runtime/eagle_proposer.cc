#include "runtime/eagle_proposer.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"
#include "runtime/draft_proposer.h"

namespace pagoda {
namespace {

// The most tokens per sequence of a decode-shaped catch-up (a decode graph's q, at most 1 + k).
constexpr size_t kMaxUniformTokens = 16;
// The layer every head pass keeps: the residual stream after the head's layer, its output g.
constexpr int32_t kOutputLayer = 0;
constexpr size_t kNoDraft = SIZE_MAX;  // a chained pass's row no draft is read from
// A sequence lags (no head pass in a one-token step without drafts) while it has at most this
// many pending tokens: on the host, a bound on the states kept; on the device, the target's
// buffer keeps its last step only, so a sequence lags only with its last one-token step pending
// (a prompt chunk or accepted drafts are computed, not dropped).
constexpr size_t kMaxHostLag = 15;
constexpr size_t kMaxDeviceLag = 1;

}  // namespace

EagleProposer::EagleProposer(Model& head, int block_size, const Model& target)
    : head_(head),
      block_size_(block_size),
      hidden_(head.definition().hidden_size),
      target_hidden_(target.config().hidden_size) {
  PAGODA_CHECK(head.definition().eagle.has_value(), "EagleProposer over a model without a head");
  target_layers_ = head.definition().eagle->target_layers;
  width_ = static_cast<int64_t>(target_layers_.size()) * target_hidden_;
  const std::optional<DeviceHidden> t = target.device_hidden_states();
  const std::optional<DeviceHidden> h = head.device_hidden_states();
  on_device_ = t && h && t->device == h->device && t->dtype == h->dtype;
  if (on_device_) {
    // Until the first observed step: no rows (a first proposal reads zeros, row -1).
    target_states_ = *t;
    target_states_.data = nullptr;
    target_states_.layers = static_cast<int>(target_layers_.size());
    target_states_.hidden = target_hidden_;
    target_states_.layer_stride = 0;
  }
  uniform_catch_up_ = !head.decode_graph_sizes(1).empty();
  chains_ = on_device_ && head.chains_on_device();
}

void EagleProposer::add_token(Pass& pass, const std::vector<int32_t>& table, int32_t position,
                              int32_t token, std::span<const float> hidden, int32_t row) const {
  const auto block = static_cast<size_t>(position / block_size_);
  PAGODA_CHECK(block < table.size(), "EAGLE: position {} past a table of {} blocks", position,
               table.size());
  pass.ids.push_back(token);
  pass.positions.push_back(position);
  pass.slots.push_back(int64_t{table[block]} * block_size_ + position % block_size_);
  if (on_device_) {
    pass.hidden_rows.push_back(row);
  } else {
    pass.hidden.insert(pass.hidden.end(), hidden.begin(), hidden.end());
  }
}

void EagleProposer::end_sequence(Pass& pass, const std::vector<int32_t>& table, int32_t end) {
  pass.query_start.push_back(static_cast<int32_t>(pass.ids.size()));
  pass.seq_lens.push_back(end);
  pass.tables.push_back(table);
  pass.max_blocks = std::max(pass.max_blocks, static_cast<int>(table.size()));
}

ForwardBatch EagleProposer::batch_of(Pass& pass, int64_t width, const DeviceHidden* source) const {
  // Tables padded to [seqs, max_blocks] with the null block. Example: [7, 9] and [4] with
  // max_blocks 2 become [7, 9, 4, 0].
  pass.flat_tables.clear();
  for (const std::vector<int32_t>& t : pass.tables) {
    pass.flat_tables.insert(pass.flat_tables.end(), t.begin(), t.end());
    pass.flat_tables.resize(
        pass.flat_tables.size() + static_cast<size_t>(pass.max_blocks) - t.size(), 0);
  }
  ForwardBatch batch{pass.ids,         pass.positions,  pass.query_start, pass.seq_lens,
                     pass.flat_tables, pass.max_blocks, pass.slots,       pass.rows};
  batch.hidden_layers = std::span<const int32_t>(&kOutputLayer, 1);
  batch.input_hidden_width = width;
  if (on_device_) {
    batch.input_hidden_device = source;
    batch.input_hidden_rows = pass.hidden_rows;
    batch.host_hidden_layers = 0;  // g stays on the device for the next pass
  } else {
    batch.input_hidden = pass.hidden;
  }
  return batch;
}

std::span<float> EagleProposer::run(Pass& pass, int64_t width, const DeviceHidden* source) {
  PAGODA_CHECK(!on_device_ || source != nullptr, "EAGLE: a device pass without its source");
  const ForwardBatch batch = batch_of(pass, width, source);
  pass.drawn.assign(pass.rows.size(), -1);
  std::vector<DrawnLogprobs> unused(pass.rows.size());
  const std::span<float> logits = head_.forward_sample(batch, pass.draws, pass.drawn, unused);
  for (size_t row = 0; row < pass.drawn.size(); ++row) {
    PAGODA_CHECK(pass.drawn[row] >= 0 || !logits.empty(),
                 "EAGLE: row {} neither drawn nor returned", row);
  }
  if (on_device_) {
    head_states_ = head_.device_hidden_states().value();
    PAGODA_CHECK(head_states_.layers == 1 && head_states_.hidden == hidden_,
                 "EAGLE: the head kept {} layers of {}", head_states_.layers, head_states_.hidden);
    return logits;
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
  std::vector<Active> active;
  std::vector<CatchUp> catch_up;  // plan order; every proposing sequence has one
  std::vector<bool> lags(plan.seqs.size(), false);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const PlannedSequence& s = plan.seqs[i];
    PAGODA_CHECK(!s.propose || s.num_spec > 0, "sequence {}: propose without drafts", s.id);
    const auto [it, inserted] = seqs_.try_emplace(s.id);
    SeqState& st = it->second;
    const int32_t n = s.num_computed;
    if (inserted || s.fresh || st.computed > n) st = SeqState{n, {}, {}, {}, 0};
    // Pending hidden states past n belong to rejected drafts.
    const auto keep = static_cast<size_t>(n - st.computed);
    if (st.tokens.size() > keep) {
      st.tokens.resize(keep);
      if (on_device_) {
        st.rows.resize(keep);
      } else {
        st.hidden.resize(keep * width);
      }
    }
    // Positions the head has no hidden state for (never observed, or on the device from a step
    // before the target's last one, since overwritten): it trusts its KV there.
    if (st.tokens.size() < keep || (on_device_ && !st.tokens.empty() && st.step != observed_))
      st = SeqState{n, {}, {}, {}, 0};
    // A one-token decode step without drafts (the adaptive length chose 0) lags: no head pass for
    // it, its pending states kept for its next proposal (observe() appends this step's; on the
    // device it keeps the last step's only, the head trusting its KV before them: acceptance
    // only). So a request that stopped speculating costs no head passes.
    if (!s.propose && s.tokens.size() == 1 &&
        st.tokens.size() <= (on_device_ ? kMaxDeviceLag : kMaxHostLag)) {
      lags[i] = true;
      continue;
    }
    CatchUp c{i, st.computed, {}, {}, {}};
    // Position p reads the token at p + 1: the pending token after it, or the step's first.
    for (size_t j = 0; j < st.tokens.size(); ++j) {
      c.ids.push_back(j + 1 < st.tokens.size() ? st.tokens[j + 1] : s.tokens[0]);
      if (on_device_) {
        c.rows.push_back(st.rows[j]);
      } else {
        c.host.push_back(st.hidden.data() + j * width);
      }
    }
    if (s.propose && st.tokens.empty()) {
      // No hidden state for n - 1 (a sequence proposing right after cached blocks): zeros, so
      // the head still drafts; its KV at n - 1 is rewritten once the target's state exists.
      PAGODA_CHECK(n > 0, "sequence {}: proposing at position 0", s.id);
      c.start = n - 1;
      c.ids.push_back(s.tokens[0]);
      c.rows.push_back(-1);
      c.host.push_back(nullptr);
    }
    if (!c.ids.empty()) catch_up.push_back(std::move(c));
    if (s.propose) active.push_back({i, n, s.num_spec});
  }
  bool greedy = !active.empty();
  for (const Active& a : active) {
    DraftProposer::size_results(plan.seqs[a.i], a.k, vocab, results[a.i]);
    greedy = greedy && DraftProposer::device_draw(plan.seqs[a.i].draft_draw).temperature == 0;
  }
  // Decode-shaped (a row per token) when every sequence of the pass proposes with the same few
  // tokens. Example: two sequences catching up [u v t] and [x y t'] ask for 6 rows; rows 2 and 5
  // give their d1.
  bool uniform = uniform_catch_up_ && !catch_up.empty();
  for (const CatchUp& c : catch_up) {
    uniform = uniform && plan.seqs[c.i].propose && c.ids.size() == catch_up[0].ids.size() &&
              c.ids.size() <= kMaxUniformTokens;
  }
  Pass first;
  std::vector<size_t> last_row;  // [active]: the row of each active sequence's draw in `first`
  const std::vector<float> zeros(on_device_ ? 0 : width, 0.0f);
  for (const CatchUp& c : catch_up) {
    const PlannedSequence& s = plan.seqs[c.i];
    const std::vector<int32_t>& table = tables.at(s.id);
    for (size_t j = 0; j < c.ids.size(); ++j) {
      std::span<const float> h;
      if (!on_device_) h = c.host[j] == nullptr ? zeros : std::span<const float>(c.host[j], width);
      add_token(first, table, c.start + static_cast<int32_t>(j), c.ids[j], h,
                on_device_ ? c.rows[j] : -1);
    }
    const size_t rows = uniform ? c.ids.size() : s.propose ? 1 : 0;
    for (size_t r = rows; r >= 1; --r) {
      first.rows.push_back(static_cast<int32_t>(first.ids.size() - r));
      first.draws.push_back(DraftProposer::device_draw(s.draft_draw));
    }
    if (s.propose) last_row.push_back(first.rows.size() - 1);
    end_sequence(first, table, s.num_computed);
  }
  PAGODA_CHECK(last_row.size() == active.size(), "EAGLE: {} catch-up rows for {} proposals",
               last_row.size(), active.size());
  // The catch-up's inputs are built (copied): every sequence of the plan is now current to n.
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    if (!lags[i]) seqs_.at(plan.seqs[i].id) = SeqState{plan.seqs[i].num_computed, {}, {}, {}, 0};
  }
  if (first.ids.empty()) return;
  if (chains_ && greedy) {
    propose_chained(plan, first, active, last_row, tables, results);
  } else {
    propose_passes(plan, first, active, last_row, tables, results);
  }
}

void EagleProposer::propose_passes(StepPlan& plan, Pass& first, std::span<const Active> active,
                                   std::span<const size_t> last_row, const Tables& tables,
                                   std::span<SequenceResult> results) {
  const auto vocab = static_cast<size_t>(head_.config().vocab_size);
  int32_t max_k = 0;
  for (const Active& a : active) max_k = std::max(max_k, a.k);
  // Pass j (1-based) draws draft j of each sequence that still needs one; pass 1 is the catch-up.
  std::span<float> logits = run(first, width_, on_device_ ? &target_states_ : nullptr);
  const Pass* last = &first;
  Pass pass;
  std::vector<size_t> in_pass;  // indices into active, in row order
  for (size_t a = 0; a < active.size(); ++a) in_pass.push_back(a);
  for (int32_t j = 1;; ++j) {
    PAGODA_CHECK(logits.empty() || logits.size() == last->rows.size() * vocab,
                 "EAGLE: {} logits for {} rows", logits.size(), last->rows.size());
    // The row of in_pass[at]'s draw in the last pass: last_row in the catch-up, then one row each.
    std::vector<size_t> prev(in_pass.size());
    for (size_t at = 0; at < in_pass.size(); ++at) {
      prev[at] = j == 1 ? last_row[in_pass[at]] : at;
      const Active& a = active[in_pass[at]];
      const std::span<float> row_logits =
          logits.empty() ? logits : logits.subspan(prev[at] * vocab, vocab);
      DraftProposer::place_draft(row_logits, last->drawn[prev[at]], static_cast<size_t>(j - 1),
                                 plan.seqs[a.i], results[a.i]);
    }
    if (j >= max_k) break;
    // Draft j, the token at n + j, is the input of position n + j - 1, with the head's output of
    // the row before it (host: outputs_ by row; device: that row's token in the head's buffer).
    std::vector<int32_t> prev_tokens(in_pass.size());
    for (size_t at = 0; at < in_pass.size(); ++at) prev_tokens[at] = last->rows[prev[at]];
    const std::vector<float> g = outputs_;  // host: [last pass rows, hidden_]
    pass = Pass{};
    std::vector<size_t> next;
    for (size_t at = 0; at < in_pass.size(); ++at) {
      const Active& act = active[in_pass[at]];
      if (act.k <= j) continue;
      const std::vector<int32_t>& table = tables.at(plan.seqs[act.i].id);
      const int32_t position = act.n + j - 1;
      std::span<const float> h;
      if (!on_device_) {
        h = std::span<const float>(g).subspan(prev[at] * static_cast<size_t>(hidden_),
                                              static_cast<size_t>(hidden_));
      }
      add_token(pass, table, position, results[act.i].drafts[static_cast<size_t>(j - 1)], h,
                prev_tokens[at]);
      pass.rows.push_back(static_cast<int32_t>(pass.ids.size()) - 1);
      pass.draws.push_back(DraftProposer::device_draw(plan.seqs[act.i].draft_draw));
      end_sequence(pass, table, position + 1);
      next.push_back(in_pass[at]);
    }
    in_pass = std::move(next);
    // The source is a copy: the pass overwrites the head's buffer it reads (after the gather).
    const DeviceHidden source = head_states_;
    logits = run(pass, hidden_, on_device_ ? &source : nullptr);
    last = &pass;
  }
}

void EagleProposer::propose_chained(StepPlan& plan, Pass& first, std::span<const Active> active,
                                    std::span<const size_t> last_row, const Tables& tables,
                                    std::span<SequenceResult> results) {
  int32_t max_k = 0;
  for (const Active& a : active) max_k = std::max(max_k, a.k);
  // passes[j] draws draft j + 1 (passes[0] is the catch-up); owners[j][r] is the active sequence
  // whose draft row r of pass j draws, kNoDraft for the catch-up's other rows. Pass j + 1 has a
  // token per sequence with k > j + 1, in the order of pass j's rows: its id is the draft drawn
  // at pass j's row r (id_rows[j + 1]) and its hidden input the head's output of that row's
  // token (the row's token index in pass j). Example: sequences A (k 3) and B (k 1) drawing at
  // rows 0 and 1 of a catch-up of 5 tokens (A's last token is token 1, B's token 4): pass 1 has
  // A alone, id row 0 and hidden row 1; pass 2 has A, id row 0 and hidden row 0.
  std::vector<Pass> passes(static_cast<size_t>(max_k));
  std::vector<std::vector<int32_t>> id_rows(passes.size());
  std::vector<std::vector<size_t>> owners(passes.size());
  passes[0] = std::move(first);
  owners[0].assign(passes[0].rows.size(), kNoDraft);
  for (size_t a = 0; a < active.size(); ++a) owners[0][last_row[a]] = a;
  for (size_t j = 1; j < passes.size(); ++j) {
    const Pass& prev = passes[j - 1];
    Pass& pass = passes[j];
    for (size_t r = 0; r < prev.rows.size(); ++r) {
      const size_t a = owners[j - 1][r];
      if (a == kNoDraft || active[a].k <= static_cast<int32_t>(j)) continue;
      const Active& act = active[a];
      const std::vector<int32_t>& table = tables.at(plan.seqs[act.i].id);
      const int32_t position = act.n + static_cast<int32_t>(j) - 1;
      add_token(pass, table, position, 0, {}, prev.rows[r]);  // id 0: replaced on the device
      id_rows[j].push_back(static_cast<int32_t>(r));
      pass.rows.push_back(static_cast<int32_t>(pass.ids.size()) - 1);
      pass.draws.push_back(DraftProposer::device_draw(plan.seqs[act.i].draft_draw));
      end_sequence(pass, table, position + 1);
      owners[j].push_back(a);
    }
  }
  std::vector<ChainedPass> chain(passes.size());
  size_t total = 0;
  for (size_t j = 0; j < passes.size(); ++j) {
    chain[j].batch =
        batch_of(passes[j], j == 0 ? width_ : hidden_, j == 0 ? &target_states_ : nullptr);
    chain[j].draws = passes[j].draws;
    chain[j].id_rows = id_rows[j];
    chain[j].hidden_from_previous = j > 0;
    total += passes[j].draws.size();
  }
  std::vector<int32_t> drawn(total, -1);
  head_.forward_chain(chain, drawn);
  head_states_ = head_.device_hidden_states().value();
  size_t offset = 0;
  for (size_t j = 0; j < passes.size(); ++j) {
    for (size_t r = 0; r < owners[j].size(); ++r) {
      const size_t a = owners[j][r];
      if (a == kNoDraft) continue;
      const Active& act = active[a];
      DraftProposer::place_draft({}, drawn[offset + r], j, plan.seqs[act.i], results[act.i]);
    }
    offset += passes[j].draws.size();
  }
}

void EagleProposer::observe(const StepPlan& plan, std::span<const float> hidden) {
  PAGODA_CHECK(!on_device_, "EAGLE: host hidden states for a head that reads them on the device");
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

void EagleProposer::observe(const StepPlan& plan, const DeviceHidden& hidden) {
  PAGODA_CHECK(on_device_, "EAGLE: device hidden states for a head that reads host ones");
  size_t total = 0;
  for (const PlannedSequence& s : plan.seqs) total += s.tokens.size();
  if (total == 0) return;  // no step ran: the last one's states stay
  PAGODA_CHECK(hidden.data != nullptr && hidden.layers == static_cast<int>(target_layers_.size()) &&
                   hidden.hidden == target_hidden_ &&
                   hidden.layer_stride >= static_cast<int64_t>(total) * target_hidden_,
               "EAGLE: the target kept {} layers of {} ({} per layer) for {} layers of {} tokens",
               hidden.layers, hidden.hidden, hidden.layer_stride, target_layers_.size(), total);
  ++observed_;
  target_states_ = hidden;
  // Token t of the plan is row t of every layer. Example: sequences A [a0 a1] and B [b0]: A's
  // pending rows [0, 1], B's [2].
  int32_t t = 0;
  for (const PlannedSequence& s : plan.seqs) {
    const auto it = seqs_.find(s.id);
    if (it == seqs_.end()) {
      t += static_cast<int32_t>(s.tokens.size());
      continue;
    }
    SeqState& st = it->second;
    if (!st.tokens.empty()) {
      // Rows of an earlier step (the sequence lagged: propose() consumed the others), since
      // overwritten: the head trusts its KV up to this step's tokens.
      PAGODA_CHECK(st.computed + static_cast<int32_t>(st.tokens.size()) == s.num_computed,
                   "EAGLE: sequence {} pending [{}, +{}) before a step from {}", s.id, st.computed,
                   st.tokens.size(), s.num_computed);
      st.tokens.clear();
      st.rows.clear();
      st.computed = s.num_computed;
    }
    st.step = observed_;
    for (const int32_t token : s.tokens) {
      st.tokens.push_back(token);
      st.rows.push_back(t++);
    }
  }
}

}  // namespace pagoda
