#include "runtime/draft_proposer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "core/splitmix64.h"
#include "core/status.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace pagoda {
namespace {

// A uniform in [0, 1) for draft `counter` of a request seeded `seed`: its own stream (the salt),
// independent of the target's draws with the same (seed, counter).
double draft_uniform(uint64_t seed, uint64_t counter) {
  constexpr uint64_t kDraftSalt = 0x6472616674ull;  // "draft"
  const uint64_t bits = splitmix64(splitmix64(seed ^ kDraftSalt) ^ counter);
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

void DraftProposer::size_results(const PlannedSequence& s, int32_t k, size_t vocab,
                                 SequenceResult& r) {
  r.drafts.assign(static_cast<size_t>(k), 0);
  if (s.draft_draw.temperature > 0) {
    r.draft_probs.assign(static_cast<size_t>(k) * vocab, 0.0f);
  } else {
    r.draft_probs.clear();
  }
}

DeviceDraw DraftProposer::device_draw(const RowDraw& d) {
  DeviceDraw out;
  if (d.temperature != 0) return out;  // sampled: its logits come back for q
  out.temperature = 0;
  out.logit_bias = d.logit_bias;
  out.masked = d.masked;
  return out;
}

void DraftProposer::place_draft(std::span<float> row_logits, int32_t drawn, size_t d,
                                PlannedSequence& s, SequenceResult& r) {
  int32_t token = drawn;
  if (token < 0) {
    PAGODA_CHECK(!row_logits.empty(), "draft {}: neither drawn nor logits", d);
    const size_t vocab = row_logits.size();
    std::span<float> q;
    if (!r.draft_probs.empty()) q = std::span(r.draft_probs).subspan(d * vocab, vocab);
    token = draw(row_logits, s.draft_draw, s.draft_draw.counter + d, q);
  }
  r.drafts[d] = token;
  s.tokens[s.tokens.size() - static_cast<size_t>(s.num_spec) + d] = token;
}

int32_t DraftProposer::draw(std::span<float> logits, const RowDraw& d, uint64_t counter,
                            std::span<float> q) {
  PAGODA_CHECK(d.temperature >= 0, "a draft draw needs a temperature >= 0, got {}", d.temperature);
  const auto vocab = static_cast<int32_t>(logits.size());
  for (const auto& [t, bias] : d.logit_bias) {
    if (t >= 0 && t < vocab) logits[static_cast<size_t>(t)] += bias;
  }
  for (const int32_t t : d.masked) {
    if (t >= 0 && t < vocab)
      logits[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
  }
  if (d.temperature == 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  PAGODA_CHECK(q.size() == logits.size(), "q of {} for {} logits", q.size(), logits.size());
  SamplingParams params;
  params.temperature = d.temperature;
  params.top_k = d.top_k;
  params.top_p = d.top_p;
  params.min_p = d.min_p;
  std::vector<int32_t> order;
  std::vector<float> probs;
  const int32_t count = truncate_candidates(logits, params, order, probs);
  double mass = 0;
  for (int32_t i = 0; i < count; ++i) mass += probs[static_cast<size_t>(i)];
  PAGODA_CHECK(mass > 0, "the draft model's row has no token left to draw");
  std::fill(q.begin(), q.end(), 0.0f);
  for (int32_t i = 0; i < count; ++i) {
    q[static_cast<size_t>(order[static_cast<size_t>(i)])] =
        static_cast<float>(probs[static_cast<size_t>(i)] / mass);
  }
  // Inverse CDF over the candidates; the token drawn always has q > 0.
  const double u = draft_uniform(d.seed, counter) * mass;
  double cum = 0;
  int32_t last = order[0];
  for (int32_t i = 0; i < count; ++i) {
    const float p = probs[static_cast<size_t>(i)];
    if (p <= 0) continue;
    last = order[static_cast<size_t>(i)];
    cum += p;
    if (u < cum) return last;
  }
  return last;
}

void DraftProposer::add(Pass& pass, const std::vector<int32_t>& table, int32_t first_position,
                        std::span<const int32_t> tokens, int rows, const RowDraw& draw) const {
  for (size_t j = 0; j < tokens.size(); ++j) {
    const int32_t p = first_position + static_cast<int32_t>(j);
    const auto block = static_cast<size_t>(p / block_size_);
    PAGODA_CHECK(block < table.size(), "draft: position {} past a table of {} blocks", p,
                 table.size());
    pass.ids.push_back(tokens[j]);
    pass.positions.push_back(p);
    pass.slots.push_back(int64_t{table[block]} * block_size_ + p % block_size_);
  }
  for (int r = rows; r >= 1; --r) {
    pass.rows.push_back(static_cast<int32_t>(pass.ids.size()) - r);
    pass.draws.push_back(device_draw(draw));
  }
  pass.query_start.push_back(static_cast<int32_t>(pass.ids.size()));
  pass.seq_lens.push_back(first_position + static_cast<int32_t>(tokens.size()));
  // Padded to max_blocks by run(): remember the table's length in front of its entries.
  pass.tables.push_back(static_cast<int32_t>(table.size()));
  pass.tables.insert(pass.tables.end(), table.begin(), table.end());
  pass.max_blocks = std::max(pass.max_blocks, static_cast<int>(table.size()));
}

std::span<float> DraftProposer::run(Pass& pass) {
  // pass.tables holds [length, entries...] per sequence; flatten to [seqs, max_blocks], 0-padded.
  // Example: [2, 7, 9, 1, 4] with max_blocks 2 becomes [7, 9, 4, 0].
  std::vector<int32_t> flat;
  flat.reserve(pass.seq_lens.size() * static_cast<size_t>(pass.max_blocks));
  for (size_t at = 0; at < pass.tables.size();) {
    const auto n = static_cast<size_t>(pass.tables[at]);
    flat.insert(flat.end(), pass.tables.begin() + static_cast<std::ptrdiff_t>(at + 1),
                pass.tables.begin() + static_cast<std::ptrdiff_t>(at + 1 + n));
    flat.resize(flat.size() + static_cast<size_t>(pass.max_blocks) - n, 0);
    at += 1 + n;
  }
  const ForwardBatch batch{pass.ids, pass.positions,  pass.query_start, pass.seq_lens,
                           flat,     pass.max_blocks, pass.slots,       pass.rows};
  pass.drawn.assign(pass.rows.size(), -1);
  std::vector<DrawnLogprobs> unused(pass.rows.size());
  const std::span<float> logits = draft_.forward_sample(batch, pass.draws, pass.drawn, unused);
  const size_t vocab = static_cast<size_t>(draft_.config().vocab_size);
  PAGODA_CHECK(logits.empty() || logits.size() == pass.rows.size() * vocab,
               "draft: {} logits for {} rows", logits.size(), pass.rows.size());
  for (size_t row = 0; row < pass.drawn.size(); ++row) {
    PAGODA_CHECK(pass.drawn[row] >= 0 || !logits.empty(),
                 "draft: row {} neither drawn nor returned", row);
  }
  return logits;
}

void DraftProposer::propose(StepPlan& plan,
                            const std::unordered_map<uint64_t, std::vector<int32_t>>& tables,
                            std::span<SequenceResult> results) {
  PAGODA_CHECK(results.size() == plan.seqs.size(), "draft: {} results for {} sequences",
               results.size(), plan.seqs.size());
  const auto vocab = static_cast<size_t>(draft_.config().vocab_size);
  // The sequences that propose: plan index, position of their last verified token t, k.
  struct Active {
    size_t i;
    int32_t t_position;
    int32_t k;
  };
  std::vector<Active> active;
  // Each sequence's catch-up tokens and its number of rows (the last ones); a sequence that
  // lags (a one-token decode step without drafts) runs no draft pass at all.
  std::vector<std::vector<int32_t>> catch_up(plan.seqs.size());
  std::vector<int> rows_of(plan.seqs.size(), 0);
  std::vector<int32_t> start_of(plan.seqs.size(), 0);
  std::vector<bool> runs(plan.seqs.size(), false);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const PlannedSequence& s = plan.seqs[i];
    PAGODA_CHECK(!s.propose || s.num_spec > 0, "sequence {}: propose without drafts", s.id);
    const auto [it, inserted] = seqs_.try_emplace(s.id);
    SeqState& st = it->second;
    if (inserted || s.fresh) st = SeqState{s.num_computed, s.num_computed, {}};
    st.computed = std::min(st.computed, s.num_computed);
    // The history keeps the verified tokens: drop what this plan recomputes (rejected drafts).
    PAGODA_CHECK(s.num_computed >= st.history_start &&
                     s.num_computed <= st.history_start + static_cast<int32_t>(st.history.size()),
                 "sequence {}: a plan from position {} with the draft's history [{}, {})", s.id,
                 s.num_computed, st.history_start,
                 st.history_start + static_cast<int32_t>(st.history.size()));
    st.history.resize(static_cast<size_t>(s.num_computed - st.history_start));
    runs[i] = s.propose || s.tokens.size() > static_cast<size_t>(s.num_spec) + 1;
    if (!runs[i]) continue;
    // Verified tokens the draft has not computed (accepted drafts, the steps it lagged), then
    // the step's tokens that are not drafts.
    std::vector<int32_t>& tokens = catch_up[i];
    tokens.assign(st.history.begin() + (st.computed - st.history_start), st.history.end());
    const size_t real = s.tokens.size() - static_cast<size_t>(s.num_spec);
    tokens.insert(tokens.end(), s.tokens.begin(),
                  s.tokens.begin() + static_cast<std::ptrdiff_t>(real));
    const auto known = static_cast<int32_t>(tokens.size());
    rows_of[i] = s.propose ? 1 : 0;
    if (mask_token_ && s.propose) {
      // Parallel drafting: k - 1 masks after t, a row for t and for each mask.
      tokens.insert(tokens.end(), static_cast<size_t>(s.num_spec - 1), *mask_token_);
      rows_of[i] = s.num_spec;
    }
    start_of[i] = st.computed;
    st.computed += known;
    if (s.propose) active.push_back({i, st.computed - 1, s.num_spec});
  }
  // A decode-shaped catch-up (every sequence in the pass proposes with the same few tokens: 1
  // after a rejection, 2 after k accepted drafts) asks for a row per token, so that a device
  // model replays its decode graph for the pass; only the last row's draw is used.
  // Example: two sequences with tokens [d4 t] and [u t'] run 4 rows; rows 1 and 3 give d1.
  size_t width = 0;
  bool uniform = !mask_token_;
  for (size_t i = 0; i < plan.seqs.size() && uniform; ++i) {
    if (!runs[i]) continue;
    if (width == 0) width = catch_up[i].size();
    uniform = plan.seqs[i].propose && catch_up[i].size() == width && width <= 2;
  }
  Pass first;
  std::vector<size_t> last_row;  // [active]: the row of each active sequence's draw in `first`
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    if (!runs[i]) continue;
    const int rows = uniform ? static_cast<int>(catch_up[i].size()) : rows_of[i];
    add(first, tables.at(plan.seqs[i].id), start_of[i], catch_up[i], rows, plan.seqs[i].draft_draw);
    if (plan.seqs[i].propose) last_row.push_back(first.rows.size() - 1);
  }
  // Every sequence's history gets this step's tokens once the drafts are placed, and forgets
  // the positions no later plan can need (before the draft's KV and this plan's start: plans
  // never start earlier, a preempted sequence comes back fresh).
  auto remember = [&] {
    for (const PlannedSequence& s : plan.seqs) {
      SeqState& st = seqs_.at(s.id);
      st.history.insert(st.history.end(), s.tokens.begin(), s.tokens.end());
      const int32_t keep_from = std::min(st.computed, s.num_computed);
      st.history.erase(st.history.begin(), st.history.begin() + (keep_from - st.history_start));
      st.history_start = keep_from;
    }
  };
  int32_t max_k = 0;
  for (const Active& a : active) {
    max_k = std::max(max_k, a.k);
    size_results(plan.seqs[a.i], a.k, vocab, results[a.i]);
  }
  // Pass j (1-based) draws draft j of each sequence that still needs one; pass 1 is the catch-up.
  std::span<float> logits = run(first);
  if (mask_token_) {
    // Every draft from the one pass: sequence a's rows are its k consecutive rows.
    size_t rows = 0;
    for (const Active& a : active) rows += static_cast<size_t>(a.k);
    PAGODA_CHECK(first.drawn.size() == rows, "draft: {} rows for {} drafts", first.drawn.size(),
                 rows);  // never uniform: one row per draft
    size_t row = 0;
    for (const Active& a : active) {
      PlannedSequence& s = plan.seqs[a.i];
      SequenceResult& r = results[a.i];
      for (size_t d = 0; d < static_cast<size_t>(a.k); ++d, ++row)
        place_draft(row_of(logits, row, vocab), first.drawn[row], d, s, r);
    }
    remember();
    return;
  }
  std::vector<size_t> in_pass;  // indices into active, in row order
  for (size_t a = 0; a < active.size(); ++a) in_pass.push_back(a);
  const Pass* last = &first;
  Pass pass;
  for (int32_t j = 1;; ++j) {
    // Pass 1's rows are last_row; later passes have one row per sequence, in in_pass order.
    PAGODA_CHECK(j == 1 || last->drawn.size() == in_pass.size(), "draft: {} rows for {} sequences",
                 last->drawn.size(), in_pass.size());
    for (size_t at = 0; at < in_pass.size(); ++at) {
      const Active& a = active[in_pass[at]];
      PlannedSequence& s = plan.seqs[a.i];
      SequenceResult& r = results[a.i];
      const size_t row = j == 1 ? last_row[in_pass[at]] : at;
      place_draft(row_of(logits, row, vocab), last->drawn[row], static_cast<size_t>(j - 1), s, r);
    }
    if (j >= max_k) break;
    pass = Pass{};
    std::vector<size_t> next;
    for (const size_t a : in_pass) {
      const Active& act = active[a];
      if (act.k <= j) continue;
      const int32_t token = results[act.i].drafts[static_cast<size_t>(j - 1)];
      add(pass, tables.at(plan.seqs[act.i].id), act.t_position + j, std::span(&token, 1), 1,
          plan.seqs[act.i].draft_draw);
      ++seqs_.at(plan.seqs[act.i].id).computed;
      next.push_back(a);
    }
    in_pass = std::move(next);
    logits = run(pass);
    last = &pass;
  }
  remember();
}

}  // namespace pagoda
