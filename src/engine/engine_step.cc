// Completing a step (engine_impl.h): prompt log-probabilities, sampling with the verification of
// drafts, the forks of n > 1 requests, and the drafts of the next step; the structured-output
// masks of a step being launched, and the stats published after each loop turn.
#include <algorithm>

#include "core/logging.h"
#include "core/splitmix64.h"
#include "core/status.h"
#include "engine/engine_impl.h"

namespace pagoda {

void EngineCore::Impl::record_prompt_logprobs(const scheduler::ScheduledRequest& s,
                                              StepResult& result, int32_t first_row) {
  // Row j of a chunk predicts prompt token num_computed + j + 1.
  ActiveRequest& a = *completions.at(s.id).request;
  const int k = *a.params.prompt_logprobs;
  a.prompt_logprobs.resize(a.prompt.size());
  std::vector<float> lp(static_cast<size_t>(result.vocab));
  for (int j = 0; j < s.num_new_tokens; ++j) {
    const size_t target = static_cast<size_t>(s.num_computed_tokens + j + 1);
    if (target >= a.prompt.size()) break;
    log_softmax(result.row(first_row + j), lp);
    const float token_lp = lp[static_cast<size_t>(a.prompt[target])];
    TokenLogprobs t{a.prompt[target], token_lp, {}};
    t.rank = 1 + static_cast<int32_t>(
                     std::count_if(lp.begin(), lp.end(), [&](float x) { return x > token_lp; }));
    if (k > 0) {
      for (const TokenLogprob& alt : top_k_entries(lp, k))
        t.top.emplace_back(alt.token, alt.logprob);
    }
    a.prompt_logprobs[target] = std::move(t);
  }
}

void EngineCore::Impl::complete_step() {
  const scheduler::SchedulerOutput out = std::move(*in_flight);
  in_flight.reset();
  const auto wait_start = std::chrono::steady_clock::now();
  StepResult result = executor->wait();
  const auto done = std::chrono::steady_clock::now();
  times.device_wait_seconds += std::chrono::duration<double>(done - wait_start).count();
  if (spec_costs && in_flight_cost.decode) {
    spec_costs->observe(in_flight_cost.batch, in_flight_cost.k,
                        std::chrono::duration<double>(done - in_flight_cost.launched).count());
  }
  ++num_steps;
  // Rows of requests that finished while the step ran (an emitted EOS or stop string, an abort)
  // are dropped: their completions are gone and the scheduler no longer runs them.
  auto live = [&](kv::RequestId id) { return completions.count(id) != 0; };
  PAGODA_CHECK(result.seqs.size() == out.scheduled.size(), "a result of {} sequences for {}",
               result.seqs.size(), out.scheduled.size());

  // Prompt log-probabilities, then sampling. A request's sampled rows are its last 1 + k rows
  // (k drafts): row j's token is accepted, and the next row read, while it equals draft j.
  std::vector<size_t> to_sample;
  std::vector<std::pair<kv::RequestId, std::vector<float>>> fork_rows;
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const scheduler::ScheduledRequest& s = out.scheduled[i];
    if (!live(s.id)) continue;
    const SequenceResult& r = result.seqs[i];
    const Completion& c = completions.at(s.id);
    const bool prompt_logits = c.request->params.prompt_logprobs.has_value() &&
                               static_cast<int>(r.tokens.size()) == s.num_new_tokens &&
                               s.num_computed_tokens < scheduler->get(s.id)->num_prompt_tokens();
    if (prompt_logits) {
      try {
        record_prompt_logprobs(s, result, r.first_row);
      } catch (const std::exception& e) {
        fail_request(std::string(c.request->id), e.what());
        continue;
      }
    }
    if (!s.samples) continue;
    // Draft-model drafts replace their placeholders before verification reads them.
    if (!r.drafts.empty()) {
      PAGODA_CHECK(static_cast<int>(r.drafts.size()) == s.num_spec_tokens,
                   "request {}: {} draft-model drafts for {} placeholders", c.request->id,
                   r.drafts.size(), s.num_spec_tokens);
      scheduler->get_mutable(s.id)->set_spec_token_ids(r.drafts);
    }
    to_sample.push_back(i);
    if (c.request->params.n > 1 && !c.request->forked) {
      const std::span<float> row =
          result.row(r.first_row + static_cast<int32_t>(r.tokens.size()) - 1);
      fork_rows.emplace_back(s.id, std::vector<float>(row.begin(), row.end()));
    }
  }
  // Each request has its own sampler and RNG, so requests are sampled in parallel on the engine's
  // pool (a 128k-vocabulary row costs ~0.5 ms; 64 of them one after the other would outlast a GPU
  // step).
  std::vector<std::vector<SampledToken>> tokens(to_sample.size());
  // A request whose draw throws fails after the loop (the pool's threads only record it).
  std::vector<std::optional<std::string>> sample_errors(to_sample.size());
  auto sample_rows = [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      try {
        sample_request(out, result, to_sample[static_cast<size_t>(j)],
                       tokens[static_cast<size_t>(j)]);
      } catch (const std::exception& e) {
        tokens[static_cast<size_t>(j)].clear();
        sample_errors[static_cast<size_t>(j)] = e.what();
      }
    }
  };
  // Rows drawn on the device only need copying: waking the pool for them would cost more than the
  // work (this runs while the device idles between steps).
  const bool any_host_row = std::any_of(to_sample.begin(), to_sample.end(), [&](size_t i) {
    const SequenceResult& r = result.seqs[i];
    return std::any_of(r.tokens.begin(), r.tokens.end(), [](int32_t t) { return t < 0; });
  });
  if (any_host_row) {
    pool->parallel_for(static_cast<int64_t>(to_sample.size()), 4, sample_rows);
  } else {
    sample_rows(0, static_cast<int64_t>(to_sample.size()));
  }
  for (size_t j = 0; j < to_sample.size(); ++j) {
    const auto it = completions.find(out.scheduled[to_sample[j]].id);
    if (sample_errors[j] && it != completions.end()) {
      fail_request(std::string(it->second.request->id), *sample_errors[j]);
    }
  }
  // Speculative decoding's counters and each request's acceptance estimate: a request that
  // verified d drafts and drew t tokens kept t - 1 of the drafts (the last token is the draw of
  // the first rejected draft's row, or the bonus token after them all).
  for (size_t j = 0; j < to_sample.size(); ++j) {
    const scheduler::ScheduledRequest& s = out.scheduled[to_sample[j]];
    if (s.num_spec_tokens == 0 || tokens[j].empty() || !live(s.id)) continue;
    const int accepted = static_cast<int>(tokens[j].size()) - 1;
    spec_counters.add(s.num_spec_tokens, accepted);
    completions.at(s.id).spec_length.observe(s.num_spec_tokens, accepted);
  }
  std::vector<std::pair<kv::RequestId, std::vector<int32_t>>> new_tokens;
  std::vector<Emit> sampled;
  // The forks' grammars start where the parent's was before its first token.
  std::unordered_map<kv::RequestId, CompletionConstraint> fork_constraints;
  for (const auto& [parent_id, row] : fork_rows) {
    if (live(parent_id)) fork_constraints.emplace(parent_id, completions.at(parent_id).constraint);
  }
  for (size_t j = 0; j < to_sample.size(); ++j) {
    const kv::RequestId id = out.scheduled[to_sample[j]].id;
    if (!live(id)) continue;  // failed above, itself or another completion of its request
    std::vector<int32_t> ids;
    for (SampledToken& t : tokens[j]) {
      completions.at(id).constraint.accept(t.token);  // the next launch's mask needs it
      ids.push_back(t.token);
      sampled.push_back({id, std::move(t), false});
    }
    new_tokens.emplace_back(id, std::move(ids));
  }
  if (kv_connector) {
    export_remote_decodes(out);
    pre_hold_turns(new_tokens);
  }
  // Beam rows are copied before update_from_output, which leaves those beams idle.
  collect_beam_rows(out, result);
  const std::vector<kv::RequestId> length_finished = scheduler->update_from_output(out, new_tokens);
  step_beam_groups(out);
  const int64_t generated_before = generation_tokens;
  generation_tokens += static_cast<int64_t>(sampled.size());

  // n > 1: each further completion samples its own first token from the parent's logits (its
  // own seed) and shares the parent's prompt blocks.
  for (auto& [parent_id, row] : fork_rows) {
    if (!live(parent_id)) continue;
    std::shared_ptr<ActiveRequest> a = completions.at(parent_id).request;
    a->forked = true;
    try {
      for (int index = 1; index < a->params.n; ++index) {
        SamplingParams child_params = a->params;
        if (child_params.seed)
          child_params.seed = *child_params.seed + static_cast<uint64_t>(index);
        Completion child{a, index,
                         RequestSampler(child_params, config().eos_token_ids, seed_source()),
                         std::nullopt, StopChecker(a->params.stop)};
        child.device_seed = child_params.seed.value_or(seed_source());
        child.draw_inputs =
            DrawInputs(child_params, a->prompt, config().eos_token_ids, config().vocab_size);
        if (tokenizer->has_value()) {
          child.detok.emplace(**tokenizer, child_params.skip_special_tokens, a->prompt);
        }
        fault_point(RequestStage::kSample, a->id);
        child.constraint = fork_constraints.at(parent_id);
        std::vector<float> child_row = row;
        SampledToken t = child.sampler.sample(child_row, a->prompt, {}, child.constraint.allowed());
        child.constraint.accept(t.token);
        const kv::RequestId child_id = next_kv_id++;
        auto r = std::make_unique<scheduler::Request>(
            child_id, a->prompt, a->params.max_tokens, a->priority,
            scheduler->get(parent_id) ? std::string(scheduler->get(parent_id)->cache_salt())
                                      : a->cache_salt);
        r->append_output_tokens(std::span<const int32_t>(&t.token, 1));
        a->completion_ids.push_back(child_id);
        completions.emplace(child_id, std::move(child));
        // With max_tokens 1 the first token is the child's last: it never runs a step (the
        // scheduler would refuse it), and emitting that token finishes it.
        if (a->params.max_tokens > 1) (void)scheduler->fork_request(parent_id, std::move(r));
        ++generation_tokens;
        sampled.push_back({child_id, std::move(t), false});
      }
    } catch (const std::exception& e) {
      fail_request(std::string(a->id), e.what());
    }
  }
  // vLLM's tokens of the step: the prompt tokens it computed and every token drawn (forks too).
  iteration_tokens.observe(in_flight_prompt_tokens + generation_tokens - generated_before);
  // A request that reached max_tokens finishes with the last of its tokens.
  for (const kv::RequestId id : length_finished) {
    for (auto it = sampled.rbegin(); it != sampled.rend(); ++it) {
      if (it->id == id) {
        it->length_finished = true;
        break;
      }
    }
  }
  propose_drafts(out);

  // Emitted by the loop once the next step is launched.
  to_emit = std::move(sampled);
}

// Verification of drafts, how it works. Drafts come from deterministic proposers (n-gram lookup,
// grammar jump-forward, a test's hook), so the draft distribution q of each draft x is one-hot
// and Leviathan et al.'s rule "accept x with probability min(1, p(x) / q(x)), else draw from
// max(p - q, 0) normalised" reads: accept x with probability p(x); on rejection draw from p with
// x removed, renormalised. Drawing y from p (the row's full processed distribution: penalties
// over the history with the drafts before it, bias, masks, temperature, top-k/min-p/top-p) with
// the request's next random number and keeping x iff y == x does exactly that: P(y = x) = p(x),
// and given y != x, y follows p restricted to the other tokens, renormalised (the residual).
// Worked example: p = (0.5, 0.3, 0.2) over tokens (a, b, c), draft b. The host sampler's inverse
// CDF maps u in [0, 0.5) to a, [0.5, 0.8) to b, [0.8, 1) to c: b is kept with probability 0.3;
// otherwise the token is a with 0.5 / 0.7 and c with 0.2 / 0.7, the residual.
// Each row draws with the random number plain decoding would use for that token (the host
// sampler's stream advances once per emitted token; a device draw's noise is keyed by (seed,
// token index)), so a seeded request gives the same tokens with or without speculation, and a
// greedy one the same argmax. Row layout (runtime/step.h): the last 1 + k rows of a request are
// the draws after its last sampled token t and after drafts d1..dk; with tokens [t d1 d2 d3] and
// draws (d1, d2, e), d1 and d2 are kept and e (row 2's draw, not d3) ends the step's tokens:
// [d1 d2 e], 3 tokens for one step.
void EngineCore::Impl::sample_request(const scheduler::SchedulerOutput& out, StepResult& result,
                                      size_t i, std::vector<SampledToken>& tokens) {
  const scheduler::ScheduledRequest& s = out.scheduled[i];
  const SequenceResult& r = result.seqs[i];
  Completion& c = completions.at(s.id);  // distinct per request: no two threads share a sampler
  fault_point(RequestStage::kSample, c.request->id);
  const scheduler::Request* req = scheduler->get(s.id);
  const auto drafts = req->spec_token_ids();
  std::vector<int32_t> output(req->output_token_ids().begin(), req->output_token_ids().end());
  const auto num_rows = static_cast<int>(r.tokens.size());
  const int first = num_rows - 1 - s.num_spec_tokens;  // the first sampled row
  const auto vocab = static_cast<size_t>(result.vocab);
  for (int row = first; row < num_rows; ++row) {
    SampledToken t;
    const int32_t drawn = r.tokens[static_cast<size_t>(row)];
    const int draft = row - first;
    // A draft model's sampled draft: Leviathan et al.'s rule with its q (RequestSampler::verify).
    const bool with_q = !r.draft_probs.empty() && draft < s.num_spec_tokens;
    if (with_q) {
      PAGODA_CHECK(drawn < 0 && r.draft_probs.size() == drafts.size() * vocab,
                   "request {}: a draft with its q needs its row's logits", c.request->id);
      bool accepted = false;
      t = c.sampler.verify(
          result.row(r.first_row + row), req->prompt_token_ids(), output, {},
          std::span<const float>(r.draft_probs).subspan(static_cast<size_t>(draft) * vocab, vocab),
          drafts[static_cast<size_t>(draft)], accepted);
      bench_override(c, output.size(), drafts[static_cast<size_t>(draft)], t, accepted);
      output.push_back(t.token);
      tokens.push_back(std::move(t));
      if (!accepted) break;
      continue;
    }
    if (drawn >= 0) {  // drawn on the device, with its log-probabilities if asked for
      t.token = drawn;
      if (c.request->params.logprobs) {
        const DrawnLogprobs& lp = r.logprobs[static_cast<size_t>(row)];
        t.logprob = lp.logprob;
        for (const auto& [token, logprob] : lp.top) t.top_logprobs.push_back({token, logprob});
      }
    } else {
      // A constrained row draws with the mask computed at launch (after the drafts before it).
      t = c.sampler.sample(result.row(r.first_row + row), req->prompt_token_ids(), output,
                           c.constraint.allowed(static_cast<size_t>(row - first)));
    }
    const bool is_draft = draft < s.num_spec_tokens && static_cast<size_t>(draft) < drafts.size();
    bool accepted = is_draft && t.token == drafts[static_cast<size_t>(draft)];
    if (is_draft) bench_override(c, output.size(), drafts[static_cast<size_t>(draft)], t, accepted);
    output.push_back(t.token);
    tokens.push_back(std::move(t));
    if (!accepted) break;
  }
}

// The benchmark switch (SpeculativeConfig::bench_acceptance_rate a): after the verifier has run,
// the draft is kept with probability a whatever it decided (its token replacing the row's draw),
// else the row's draw ends the step. The uniform hashes (request id, token index), so runs repeat.
void EngineCore::Impl::bench_override(const Completion& c, size_t index, int32_t draft,
                                      SampledToken& t, bool& accepted) const {
  if (!args.speculative_config || !args.speculative_config->bench_acceptance_rate) return;
  constexpr uint64_t kSalt = 0x62656e6368ull;  // "bench"
  const uint64_t bits = splitmix64(splitmix64(std::hash<std::string>{}(c.request->id) ^ kSalt) ^
                                   static_cast<uint64_t>(index));
  const double u = static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
  accepted = u < *args.speculative_config->bench_acceptance_rate;
  if (accepted) t.token = draft;
}

void EngineCore::Impl::propose_drafts(const scheduler::SchedulerOutput& out) {
  // The requests that may draft now, with their room (drafts past max_tokens would be computed
  // for nothing: the step keeps at most max_tokens - output tokens, one of them the draw after
  // the drafts).
  std::vector<std::pair<scheduler::Request*, int>> eligible;
  for (const scheduler::ScheduledRequest& s : out.scheduled) {
    scheduler::Request* r = scheduler->get_mutable(s.id);
    if (r == nullptr || !s.samples || !live_completion(s.id)) continue;
    // Verification (sample_request) is exact for every sampling setting. Not handled yet: n > 1
    // (the parent's first rows feed its forks) and prompt log-probabilities.
    Completion& c = completions.at(s.id);
    const SamplingParams& p = c.request->params;
    if (p.n > 1 || p.prompt_logprobs) continue;
    const int room = r->max_tokens() - r->num_output_tokens() - 1;
    if (room <= 0) continue;
    if (c.constraint.decoding) {
      // Constrained: the grammar's forced text (jump-forward), never the proposer's drafts.
      // Only while the request steps alone: a step whose sequences have different numbers of
      // tokens cannot replay a decode graph.
      if (args.structured_outputs_jump_forward > 0 && out.scheduled.size() == 1 &&
          tokenizer->has_value()) {
        r->set_spec_token_ids(
            c.constraint.forced_drafts(**tokenizer, args.structured_outputs_jump_forward));
      }
      continue;
    }
    if (max_spec_tokens > 0) eligible.emplace_back(r, room);
  }
  if (eligible.empty()) return;
  // Adaptive length with measured costs (engine/speculation_costs.h): the batch's length caps
  // each request's own choice (a probe excepted), made with the same relative costs.
  int batch_k = max_spec_tokens;
  std::vector<double> relative_cost;
  const int batch = static_cast<int>(out.scheduled.size());
  if (spec_costs) {
    std::vector<std::pair<double, int>> estimates;
    for (const auto& [r, room] : eligible)
      estimates.emplace_back(completions.at(r->id()).spec_length.acceptance(), room);
    batch_k = spec_costs->choose(batch, estimates);
    for (int k = 0; k <= max_spec_tokens; ++k)
      relative_cost.push_back(spec_costs->relative_cost(batch, k));
  }
  bool probed_this_step = false;
  ++steps_since_probe;
  for (const auto& [r, room] : eligible) {
    Completion& c = completions.at(r->id());
    int k = max_spec_tokens;
    if (args.speculative_config) {
      const SpeculativeConfig& config = *args.speculative_config;
      k = relative_cost.empty()
              ? c.spec_length.choose(max_spec_tokens, config.adaptive, config.draft_row_cost)
              : c.spec_length.choose(max_spec_tokens, config.adaptive, relative_cost);
      if (!c.spec_length.probed()) {
        k = std::min(k, batch_k);
      } else if (spec_costs) {
        // Probes are rationed by batch size (measured costs only, so CPU runs repeat): one probe
        // per step at most, and batch / 4 steps apart, since a probe's catch-up pass computes
        // the tokens its request's draft skipped. A refused probe is asked again next step.
        if (steps_since_probe < batch / 4 || probed_this_step) {
          c.spec_length.defer_probe();
          k = 0;
        } else {
          probed_this_step = true;
          steps_since_probe = 0;
        }
      }
    }
    k = std::min(k, room);
    if (k <= 0) continue;
    std::vector<int32_t> drafts;
    if (args.speculative_proposer) {
      drafts = args.speculative_proposer(r->all_token_ids());
      if (drafts.size() > static_cast<size_t>(k)) drafts.resize(static_cast<size_t>(k));
    } else if (draft_model) {
      // k placeholders: the executor's draft model proposes them in the next step, just before
      // the target verifies them (runtime/draft_proposer.h).
      drafts.assign(static_cast<size_t>(k), 0);
    } else {
      const SpeculativeConfig& config = *args.speculative_config;
      if (!c.ngram) c.ngram.emplace(config.prompt_lookup_min, config.prompt_lookup_max);
      drafts = c.ngram->propose(r->all_token_ids(), k);
    }
    r->set_spec_token_ids(std::move(drafts));
  }
}

void EngineCore::Impl::export_remote_decodes(const scheduler::SchedulerOutput& out) {
  for (const scheduler::ScheduledRequest& s : out.scheduled) {
    if (!s.samples) continue;
    const auto it = completions.find(s.id);
    if (it == completions.end()) continue;
    ActiveRequest& a = *it->second.request;
    const scheduler::Request* r = scheduler->get(s.id);
    if (!a.do_remote_decode || a.transfer_out || r == nullptr || r->num_output_tokens() != 0)
      continue;
    try {
      a.transfer_out =
          kv_connector->export_prompt(a.id, r->prompt_token_ids(), kv_manager->block_table(s.id));
    } catch (const std::exception& e) {
      fail_request(a.id, fmt::format("exporting the prompt's KV: {}", e.what()));
    }
  }
}

void EngineCore::Impl::take_kv_arrivals() {
  for (KVConnector::Arrival& arrival : kv_connector->take_arrivals()) {
    if (take_import_arrival(arrival)) continue;
    const scheduler::Request* r = scheduler->get(arrival.id);
    if (r == nullptr || r->status() != scheduler::RequestStatus::kWaitingForRemoteKV)
      continue;  // aborted
    std::string why;
    const int num_blocks = kv_connector->accept(arrival, r->prompt_token_ids(), why);
    if (!why.empty()) {
      const auto c = completions.find(arrival.id);
      spdlog::warn("KV transfer for request {} failed, prefilling locally: {}",
                   c != completions.end() ? c->second.request->id : std::string("?"), why);
    }
    scheduler->remote_kv_ready(arrival.id, num_blocks);
  }
}

void EngineCore::Impl::fill_masks(const scheduler::SchedulerOutput& out, StepPlan& plan) {
  // Structured outputs: each constrained row's mask of its next token, on the pool when there
  // are several (a mask costs microseconds; one whose position was not seen before, tens). A
  // constrained request's drafts are jump-forward drafts (CompletionConstraint): its sampled rows
  // are its last 1 + num_spec_tokens, row j with the mask after drafts 0..j-1.
  std::vector<size_t> constrained;
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    if (!out.scheduled[i].samples || plan.seqs[i].rows.empty()) continue;
    const auto it = completions.find(out.scheduled[i].id);
    if (it != completions.end() && it->second.constraint.active()) constrained.push_back(i);
  }
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const size_t i = constrained[static_cast<size_t>(j)];
      const scheduler::ScheduledRequest& s = out.scheduled[i];
      CompletionConstraint& cc = completions.at(s.id).constraint;
      const auto drafts = scheduler->get(s.id)->spec_token_ids().first(std::min(
          static_cast<size_t>(s.num_spec_tokens), scheduler->get(s.id)->spec_token_ids().size()));
      (void)cc.compute_masks(drafts);
      std::vector<RowDraw>& rows = plan.seqs[i].rows;
      const size_t first = rows.size() - 1 - static_cast<size_t>(s.num_spec_tokens);
      for (size_t k = first; k < rows.size(); ++k) {
        const std::span<const uint32_t> mask = cc.allowed(k - first);
        rows[k].allowed.assign(mask.begin(), mask.end());
      }
    }
  };
  if (constrained.size() >= 8) {
    pool->parallel_for(static_cast<int64_t>(constrained.size()), 4, fill);
  } else {
    fill(0, static_cast<int64_t>(constrained.size()));
  }
}

void EngineCore::Impl::publish_stats() {
  const auto prefix = kv_manager->prefix_cache_stats();
  std::lock_guard lock(mutex);
  stats.num_running = scheduler->num_running();
  stats.num_waiting = scheduler->num_waiting();
  stats.kv_cache_usage = kv_manager->usage();
  stats.num_preemptions = scheduler->num_preemptions_total();
  stats.prefix_cache_queries_tokens = prefix.queries_tokens;
  stats.prefix_cache_hits_tokens = prefix.hits_tokens;
  stats.prefix_cache_imported_hits_tokens = kv_manager->imported_hits_tokens();
  stats.external_prefix_cache_queries_tokens = kv_manager->host_cache_stats().queries_tokens;
  stats.external_prefix_cache_hits_tokens = kv_manager->host_cache_stats().hits_tokens;
  if (host_transfer) {
    stats.host_kv_blocks_saved = host_transfer->blocks_saved();
    stats.host_kv_blocks_loaded = host_transfer->blocks_loaded();
    stats.host_kv_cache_usage = host_tier->usage();
  }
  if (kv_connector) {
    kv_connector->fill_consumer_stats(stats);
    kv_connector->fill_producer_stats(stats);
  }
  stats.prompt_tokens = prompt_tokens;
  stats.generation_tokens = generation_tokens;
  stats.num_steps = num_steps;
  stats.iteration_tokens = iteration_tokens;
  stats.spec_decode_num_drafts = spec_counters.num_drafts;
  stats.spec_decode_num_draft_tokens = spec_counters.num_draft_tokens;
  stats.spec_decode_num_accepted_tokens = spec_counters.num_accepted_tokens;
  stats.spec_decode_num_accepted_tokens_per_pos = spec_counters.accepted_per_pos;
  stats.step_times = times;
}

}  // namespace pagoda
