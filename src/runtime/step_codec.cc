#include "runtime/step_codec.h"

namespace pagoda::codec {
namespace {

// The fixed-size fields of a RowDraw, in one POD so they travel in one put.
struct RowScalars {
  float temperature;
  float top_p;
  float min_p;
  float repetition_penalty;
  float presence_penalty;
  float frequency_penalty;
  uint64_t seed;
  uint64_t counter;
  int32_t top_k;
  int32_t num_logprobs;
};

void write_row(Writer& w, const RowDraw& d) {
  w.put(RowScalars{d.temperature, d.top_p, d.min_p, d.repetition_penalty, d.presence_penalty,
                   d.frequency_penalty, d.seed, d.counter, d.top_k, d.num_logprobs});
  w.put_vector(d.penalty_tokens);
  w.put_pair_vector(d.logit_bias);
  w.put_vector(d.masked);
  w.put_vector(d.allowed);
}

RowDraw read_row(Reader& r) {
  const auto s = r.get<RowScalars>();
  RowDraw d;
  d.temperature = s.temperature;
  d.top_p = s.top_p;
  d.min_p = s.min_p;
  d.repetition_penalty = s.repetition_penalty;
  d.presence_penalty = s.presence_penalty;
  d.frequency_penalty = s.frequency_penalty;
  d.seed = s.seed;
  d.counter = s.counter;
  d.top_k = s.top_k;
  d.num_logprobs = s.num_logprobs;
  d.penalty_tokens = r.get_vector<DrawPenaltyToken>();
  d.logit_bias = r.get_pair_vector<int32_t, float>();
  d.masked = r.get_vector<int32_t>();
  d.allowed = r.get_vector<uint32_t>();
  return d;
}

}  // namespace

void write_plan(Writer& w, const StepPlan& plan) {
  w.put<uint64_t>(plan.seqs.size());
  for (const PlannedSequence& s : plan.seqs) {
    w.put(s.id);
    w.put(s.num_computed);
    w.put(s.num_spec);
    w.put(s.block_table_start);
    w.put_vector(s.tokens);
    w.put_vector(s.new_blocks);
    w.put<uint64_t>(s.rows.size());
    for (const RowDraw& d : s.rows) write_row(w, d);
    w.put<uint8_t>(static_cast<uint8_t>((s.fresh ? 1 : 0) | (s.propose ? 2 : 0)));
    if (s.propose) write_row(w, s.draft_draw);
  }
  w.put_pair_vector(plan.block_copies);
  w.put_vector(plan.finished);
  w.put_vector(plan.hidden_layers);
}

StepPlan read_plan(Reader& r) {
  StepPlan plan;
  const auto n = r.get<uint64_t>();
  PAGODA_CHECK(n < (1u << 24), "codec: a plan of {} sequences", n);
  plan.seqs.resize(n);
  for (PlannedSequence& s : plan.seqs) {
    s.id = r.get<uint64_t>();
    s.num_computed = r.get<int32_t>();
    s.num_spec = r.get<int32_t>();
    s.block_table_start = r.get<int32_t>();
    s.tokens = r.get_vector<int32_t>();
    s.new_blocks = r.get_vector<int32_t>();
    const auto rows = r.get<uint64_t>();
    PAGODA_CHECK(rows <= s.tokens.size(), "codec: {} rows for {} tokens", rows, s.tokens.size());
    s.rows.reserve(rows);
    for (uint64_t j = 0; j < rows; ++j) s.rows.push_back(read_row(r));
    const auto flags = r.get<uint8_t>();
    s.fresh = (flags & 1) != 0;
    s.propose = (flags & 2) != 0;
    if (s.propose) s.draft_draw = read_row(r);
  }
  plan.block_copies = r.get_pair_vector<int32_t, int32_t>();
  plan.finished = r.get_vector<uint64_t>();
  plan.hidden_layers = r.get_vector<int32_t>();
  return plan;
}

void write_result(Writer& w, const StepResult& result) {
  w.put<int64_t>(result.vocab);
  w.put<uint64_t>(result.logits.size());
  w.put<uint64_t>(result.hidden_states.size());
  w.put<uint64_t>(result.seqs.size());
  for (const SequenceResult& s : result.seqs) {
    w.put(s.first_row);
    w.put_vector(s.tokens);
    w.put<uint64_t>(s.logprobs.size());
    for (const DrawnLogprobs& lp : s.logprobs) {
      w.put(lp.logprob);
      w.put_pair_vector(lp.top);
    }
    w.put_vector(s.drafts);
    w.put_vector(s.draft_probs);
  }
}

ResultHeader read_result(Reader& r) {
  ResultHeader h;
  h.result.vocab = r.get<int64_t>();
  h.logits_elems = r.get<uint64_t>();
  h.hidden_elems = r.get<uint64_t>();
  const auto n = r.get<uint64_t>();
  PAGODA_CHECK(n < (1u << 24), "codec: a result of {} sequences", n);
  h.result.seqs.resize(n);
  for (SequenceResult& s : h.result.seqs) {
    s.first_row = r.get<int32_t>();
    s.tokens = r.get_vector<int32_t>();
    const auto rows = r.get<uint64_t>();
    PAGODA_CHECK(rows == s.tokens.size(), "codec: {} logprobs for {} rows", rows, s.tokens.size());
    s.logprobs.resize(rows);
    for (DrawnLogprobs& lp : s.logprobs) {
      lp.logprob = r.get<float>();
      lp.top = r.get_pair_vector<int32_t, float>();
    }
    s.drafts = r.get_vector<int32_t>();
    s.draft_probs = r.get_vector<float>();
  }
  return h;
}

void write_info(Writer& w, const ExecutorInfo& info) {
  w.put(info.kv_spec);
  w.put(info.on_device);
  w.put(info.vocab_size);
  w.put<uint8_t>(info.draft_kv_spec ? 1 : 0);
  if (info.draft_kv_spec) w.put(*info.draft_kv_spec);
  w.put(info.draft_context);
}

ExecutorInfo read_info(Reader& r) {
  ExecutorInfo info;
  info.kv_spec = r.get<kv::KVCacheSpec>();
  info.on_device = r.get<bool>();
  info.vocab_size = r.get<int64_t>();
  if (r.get<uint8_t>() != 0) info.draft_kv_spec = r.get<kv::KVCacheSpec>();
  info.draft_context = r.get<int64_t>();
  return info;
}

}  // namespace pagoda::codec
