// Beam search in the engine (engine_impl.h; the search's rules are in beam_search.h).
//
// How it works. A beam-search request is a BeamGroup whose live beams are ordinary sequences of
// the scheduler and the KV cache manager, marked deferred (Request::set_deferred_tokens): their
// steps return their next-token row as logits, on every backend, and the engine, not the
// scheduler, appends their tokens. The group starts as one sequence, the prompt. When a beam's
// step reaches the end of its tokens its log-softmax row is kept and the beam idles; once every
// live beam has its row, the group takes a search step (BeamSearch::candidates / advance) and
// turns the next live beams into sequences: a parent chosen once goes on with its token
// (Scheduler::append_tokens); a parent chosen k > 1 times is forked k - 1 times
// (Scheduler::fork_request), each child sharing the parent's full KV blocks by reference count
// and getting a copy of its last, partial block (copy-on-write, made before the next step, in
// which both write to it); a parent not chosen is finished, its references dropped. So the
// prompt's blocks and the beams' common prefixes are held once, and when the search ends every
// sequence is freed: KV usage returns to zero.
//
// Rows may come in different steps (the token budget, max_num_seqs, a preemption): the group
// simply waits for the last. Preemption recomputes a beam like any sequence; an idle beam (its
// row already kept) is the first the scheduler preempts for a waiting one, since it loses only
// KV, which is how a group whose siblings wait for blocks or running slots still makes progress.
// The choices come back at the end, all at once and best first (vLLM's beam search does the
// same, streamed or not).
#include <algorithm>
#include <limits>

#include "core/logging.h"
#include "core/status.h"
#include "engine/engine_impl.h"

namespace pagoda {

namespace {

// The distinct token ids that end a beam.
std::vector<int32_t> beam_stop_tokens(const SamplingParams& p, const std::vector<int32_t>& eos) {
  std::vector<int32_t> out = p.stop_token_ids;
  if (!p.ignore_eos) out.insert(out.end(), eos.begin(), eos.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::binary_search(ids.begin(), ids.end(), id);
}

}  // namespace

void EngineCore::Impl::admit_beam(const std::shared_ptr<ActiveRequest>& request,
                                  kv::RequestId kv_id) {
  const SamplingParams& p = request->params;
  std::vector<int32_t> stop_tokens = beam_stop_tokens(p, config().eos_token_ids);
  const BeamSearchOptions options{p.n, p.length_penalty, p.early_stopping, p.max_tokens,
                                  static_cast<int>(stop_tokens.size())};
  auto group = std::make_unique<BeamGroup>(
      BeamGroup{BeamSearch(options), {kv_id}, {{}}, {false}, {}, std::move(stop_tokens), 0});
  if (!p.stop.empty() && tokenizer->has_value()) {
    group->texts.push_back(
        BeamText{StreamingDetokenizer(**tokenizer, p.skip_special_tokens, request->prompt),
                 StopChecker(p.stop)});
  }
  auto r = std::make_unique<scheduler::Request>(kv_id, request->prompt, p.max_tokens,
                                                request->priority, request->cache_salt);
  r->set_deferred_tokens();
  scheduler->add_request(std::move(r));  // the last step that may throw: nothing to undo
  request->beam = std::move(group);
  request->completion_ids.push_back(kv_id);
  requests[request->id] = request;
  beam_seqs.emplace(kv_id, request);
}

void EngineCore::Impl::collect_beam_rows(const scheduler::SchedulerOutput& out,
                                         StepResult& result) {
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const scheduler::ScheduledRequest& s = out.scheduled[i];
    const auto it = beam_seqs.find(s.id);
    if (it == beam_seqs.end() || !s.samples) continue;
    BeamGroup& g = *it->second->beam;
    const auto at = std::find(g.ids.begin(), g.ids.end(), s.id);
    PAGODA_CHECK(at != g.ids.end(), "beam sequence {} is not a live beam", s.id);
    const auto b = static_cast<size_t>(at - g.ids.begin());
    // A beam's step has one row, its next token's (the plan asked for its logits).
    const SequenceResult& r = result.seqs[i];
    const std::span<float> logits =
        result.row(r.first_row + static_cast<int32_t>(r.tokens.size()) - 1);
    if (g.search.num_generated() == 0) {
      g.num_cached_tokens = scheduler->get(s.id)->num_cached_prompt_tokens();
    }
    g.rows[b].resize(logits.size());
    log_softmax(logits, g.rows[b]);
    g.has_row[b] = true;
  }
}

void EngineCore::Impl::step_beam_groups(const scheduler::SchedulerOutput& out) {
  std::vector<std::shared_ptr<ActiveRequest>> ready;
  for (const scheduler::ScheduledRequest& s : out.scheduled) {
    const auto it = beam_seqs.find(s.id);
    if (it == beam_seqs.end() || !s.samples) continue;
    const BeamGroup& g = *it->second->beam;
    const bool all_rows = std::all_of(g.has_row.begin(), g.has_row.end(), [](bool b) { return b; });
    if (all_rows && std::find(ready.begin(), ready.end(), it->second) == ready.end())
      ready.push_back(it->second);
  }
  for (const std::shared_ptr<ActiveRequest>& a : ready) {
    try {
      fault_point(RequestStage::kSample, a->id);
      beam_step(a);
    } catch (const std::exception& e) {
      fail_request(std::string(a->id), e.what());
    }
  }
}

void EngineCore::Impl::drop_beam(kv::RequestId id) {
  scheduler->finish_request(id,
                            scheduler::RequestStatus::kFinishedAborted);  // frees its references
  planner.forget(id);
  beam_seqs.erase(id);
}

void EngineCore::Impl::beam_step(const std::shared_ptr<ActiveRequest>& request) {
  ActiveRequest& a = *request;
  BeamGroup& g = *a.beam;
  const SamplingParams& p = a.params;
  const int generated = g.search.num_generated();
  // Below min_tokens nothing may end: the stop tokens are masked, the stop strings disarmed.
  const bool armed = generated + 1 > p.min_tokens;
  if (!armed) {
    for (std::vector<float>& row : g.rows) {
      for (int32_t t : g.stop_tokens) {
        if (static_cast<size_t>(t) < row.size())
          row[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
      }
    }
  }
  std::vector<std::span<const float>> rows(g.rows.begin(), g.rows.end());
  const std::vector<BeamCandidate> candidates = g.search.candidates(rows);

  // How each candidate ends, as emit_token rules for a completion: a stop token (its text never
  // reaches the detokenizer), else a stop string in the text so far.
  std::vector<std::optional<BeamEnd>> ends(candidates.size());
  std::vector<std::optional<BeamText>> texts(candidates.size());
  for (size_t j = 0; j < candidates.size(); ++j) {
    const BeamCandidate& c = candidates[j];
    if (contains(g.stop_tokens, c.token)) {
      const bool stop_token = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(),
                                        c.token) != p.stop_token_ids.end();
      ends[j] = BeamEnd{FinishReason::kStop, stop_token ? std::to_string(c.token) : ""};
      continue;
    }
    if (g.texts.empty()) continue;
    BeamText text = g.texts[static_cast<size_t>(c.beam)];
    (void)text.stop.add(text.detok.add(c.token), armed);
    if (text.stop.matched()) ends[j] = BeamEnd{FinishReason::kStop, *text.stop.matched()};
    texts[j] = std::move(text);
  }
  const std::vector<BeamCandidate> next = g.search.advance(candidates, ends);
  generation_tokens += static_cast<int64_t>(g.ids.size());
  if (g.search.done()) {
    finish_beam_group(request, nullptr);
    return;
  }

  // The parents' sequences become the next live beams: dropped first (their blocks may serve the
  // forks' copies), then continued once, then forked for each further choice.
  std::vector<int> chosen(g.ids.size(), 0);
  for (const BeamCandidate& c : next) ++chosen[static_cast<size_t>(c.beam)];
  for (size_t b = 0; b < g.ids.size(); ++b) {
    if (chosen[b] == 0) drop_beam(g.ids[b]);
  }
  std::vector<kv::RequestId> ids;
  std::vector<BeamText> next_texts;
  std::vector<bool> continued(g.ids.size(), false);
  for (size_t i = 0; i < next.size(); ++i) {
    const BeamCandidate& c = next[i];
    const auto parent = static_cast<size_t>(c.beam);
    const kv::RequestId parent_id = g.ids[parent];
    if (!g.texts.empty()) {
      const auto j =
          static_cast<size_t>(std::find_if(candidates.begin(), candidates.end(),
                                           [&](const BeamCandidate& x) {
                                             return x.beam == c.beam && x.token == c.token;
                                           }) -
                              candidates.begin());
      next_texts.push_back(std::move(*texts.at(j)));
    }
    if (!continued[parent]) {
      continued[parent] = true;
      scheduler->append_tokens(parent_id, std::span<const int32_t>(&c.token, 1));
      ids.push_back(parent_id);
      continue;
    }
    const kv::RequestId child_id = next_kv_id++;
    const scheduler::Request* parent_request = scheduler->get(parent_id);
    auto child = std::make_unique<scheduler::Request>(
        child_id, a.prompt, p.max_tokens, a.priority,
        parent_request != nullptr ? std::string(parent_request->cache_salt()) : a.cache_salt);
    child->append_output_tokens(g.search.live()[i].tokens);
    child->set_deferred_tokens();
    (void)scheduler->fork_request(parent_id, std::move(child));
    beam_seqs.emplace(child_id, request);
    ids.push_back(child_id);
  }
  g.ids = std::move(ids);
  g.texts = std::move(next_texts);
  g.rows.assign(g.ids.size(), std::vector<float>());
  g.has_row.assign(g.ids.size(), false);
}

void EngineCore::Impl::finish_beam_group(const std::shared_ptr<ActiveRequest>& request,
                                         const std::string* error) {
  ActiveRequest& a = *request;
  BeamGroup& g = *a.beam;
  for (const kv::RequestId id : g.ids) drop_beam(id);
  g.ids.clear();
  const SamplingParams& p = a.params;
  auto base = [&](int index) {
    RequestOutput out;
    out.request_id = a.id;
    out.index = index;
    out.num_prompt_tokens = static_cast<int>(a.prompt.size());
    out.num_cached_tokens = g.num_cached_tokens;
    if (index == 0 && a.first_scheduled) {
      using Seconds = std::chrono::duration<double>;
      out.queue_seconds = Seconds(*a.first_scheduled - a.submitted).count();
      out.prefill_seconds = Seconds(std::chrono::steady_clock::now() - *a.first_scheduled).count();
    }
    return out;
  };
  if (error != nullptr) {
    for (int i = 0; i < p.n; ++i) {
      RequestOutput out = base(i);
      out.finish_reason = FinishReason::kAbort;
      out.error = *error;
      a.stream->push(std::move(out));
    }
  } else {
    const std::vector<BeamHypothesis>& hyps = g.search.finished();
    for (size_t i = 0; i < hyps.size(); ++i) {
      const BeamHypothesis& h = hyps[i];
      RequestOutput out = base(static_cast<int>(i));
      out.token_ids = h.tokens;
      out.finish_reason = h.end.reason;
      out.stop_reason = h.end.stop_reason;
      out.cumulative_logprob = h.sum_logprob;
      out.beam_score = h.score;
      if (tokenizer->has_value()) {
        // The text as a completion's: without its stop token, cut before its stop string.
        StreamingDetokenizer detok(**tokenizer, p.skip_special_tokens, a.prompt);
        StopChecker stop(p.stop);
        const bool stop_token = !h.tokens.empty() && contains(g.stop_tokens, h.tokens.back()) &&
                                h.end.reason == FinishReason::kStop;
        const size_t num_text = h.tokens.size() - (stop_token ? 1 : 0);
        for (size_t t = 0; t < num_text && !stop.matched(); ++t) {
          out.text += stop.add(detok.add(h.tokens[t]), static_cast<int>(t) + 1 >= p.min_tokens);
        }
        if (!stop.matched()) out.text += stop.add(detok.flush());
        if (!stop.matched()) out.text += stop.flush();
      }
      a.stream->push(std::move(out));
    }
  }
  publish_stats();  // a caller that saw its stream close sees the blocks freed too
  a.stream->close();
  requests.erase(a.id);
  std::lock_guard lock(mutex);
  live_ids.erase(a.id);
}

}  // namespace pagoda
