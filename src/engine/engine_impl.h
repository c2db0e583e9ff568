#pragma once
// The engine's state (internal to engine/): the requests it tracks, their completions, and the
// Impl behind EngineCore. engine_core.cc has the construction, the loop, admission, the step's
// launch and the emission of tokens; engine_step.cc completes a step (prompt log-probabilities,
// sampling with draft verification, forks, drafts for the next step), fills a launch's masks and
// publishes the stats; engine_beam.cc runs beam search; engine_kv_return.cc bi-directional KV.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "engine/beam_search.h"
#include "engine/constrained_decoding.h"
#include "engine/draw_inputs.h"
#include "engine/engine_core.h"
#include "engine/host_kv_transfer.h"
#include "engine/kv_connector.h"
#include "engine/ngram_proposer.h"
#include "engine/speculation.h"
#include "engine/speculation_costs.h"
#include "engine/step_planner.h"
#include "engine/stop_checker.h"
#include "kv/kv_cache_manager.h"
#include "runtime/executor.h"
#include "sampling/sampler.h"
#include "scheduler/scheduler.h"
#include "structured/grammar_compiler.h"
#include "structured/vocabulary.h"
#include "tokenizer/streaming_detokenizer.h"

namespace pagoda {

/// The text of a live beam so far, for stop strings: its detokenizer and stop checker.
struct BeamText {
  StreamingDetokenizer detok;
  StopChecker stop;
};

/// A beam-search request's state (engine_beam.cc): the search, and per live beam its sequence in
/// the scheduler and the KV cache, the row of its next token once computed, and its text.
struct BeamGroup {
  BeamSearch search;
  std::vector<kv::RequestId> ids;  // [live beams]: live beam i is sequence ids[i]
  // [live beams][vocab]: live beam i's log-softmax row for the next step, valid when has_row[i]
  // (a step waits for the rows of all its live beams, which may come from different steps).
  std::vector<std::vector<float>> rows;
  std::vector<bool> has_row;
  std::vector<BeamText> texts;       // [live beams], with stop strings (and a tokenizer) only
  std::vector<int32_t> stop_tokens;  // EOS (unless ignore_eos) and stop_token_ids, distinct
  int num_cached_tokens = 0;         // prompt tokens the first sequence found in the prefix cache
};

/// A request as the engine tracks it: parameters, output channel, and its n completions.
struct ActiveRequest {
  std::string id;
  SamplingParams params;
  std::vector<int32_t> prompt;
  int priority = 0;
  std::string cache_salt;
  std::shared_ptr<OutputStream> stream;
  std::vector<kv::RequestId> completion_ids;  // index -> kv id (grows when forks happen)
  int num_unfinished = 1;
  bool forked = false;
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  std::chrono::steady_clock::time_point submitted;                       // submit() was called
  std::optional<std::chrono::steady_clock::time_point> first_scheduled;  // first step it ran in
  std::optional<RequestConstraint> constraint;                           // structured outputs
  std::unique_ptr<BeamGroup> beam;  // use_beam_search: the search (no Completion then)
  // Prefill/decode disaggregation (EngineRequest's fields): a producer's request keeps its
  // prompt KV for a consumer (transfer_out once exported); a consumer's pulls `remote`.
  bool do_remote_decode = false;
  bool do_remote_prefill = false;
  KVTransferParams remote;
  std::optional<KVTransferParams> transfer_out;
  bool return_kv = false;  // bi-directional KV: keep the finished turn's blocks for a pull
};

/// One of a request's completions: its sampler, detokenizer and stop strings.
struct Completion {
  std::shared_ptr<ActiveRequest> request;
  int index = 0;
  RequestSampler sampler;
  std::optional<StreamingDetokenizer> detok;
  StopChecker stop;
  int num_output_tokens = 0;
  int num_cached_tokens = 0;
  uint64_t device_seed = 0;           // the seed of draws made on the model's device
  DrawInputs draw_inputs{};           // the sparse processor lists of those draws
  CompletionConstraint constraint{};  // structured outputs
  std::optional<NgramIndex> ngram{};  // speculative decoding's n-gram index, made when first asked
  SpeculationLength spec_length{};    // its acceptance estimate and choice of k
};

/// Whether a completion's draws depend on the tokens before them in a step (penalties, bad_words,
/// the min_tokens mask): its rows after the first need the drafts before them in their history.
inline bool draws_read_history(const SamplingParams& p, int num_output_tokens) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f || !p.bad_words_token_ids.empty() ||
         num_output_tokens < p.min_tokens;
}

/// How a completion's next token is drawn: on the model's device (processors, truncations and
/// log-probabilities included; only the token and its log-probabilities come back) unless it needs
/// the raw row on the host: the first token of an n > 1 request, which its forks sample too. (A
/// row whose logits also come back, the last of a prompt with prompt log-probabilities, is drawn
/// on the device all the same.) A model without a device sampler (the CPU model) returns every
/// row, and the CPU sampler draws it.
inline DeviceDraw device_draw(Completion& c, const scheduler::Request& r) {
  const SamplingParams& p = c.request->params;
  if (p.n > 1 && !c.request->forked) return DeviceDraw{};
  return c.draw_inputs.draw(p, c.device_seed, r.output_token_ids());
}

inline TokenLogprobs to_token_logprobs(const SampledToken& t) {
  TokenLogprobs out{t.token, t.logprob, {}};
  for (const TokenLogprob& alt : t.top_logprobs) out.top.emplace_back(alt.token, alt.logprob);
  return out;
}

struct EngineCore::Impl {
  EngineArgs args;
  // Made first: the worker-process executor forks before the engine has threads of its own.
  std::unique_ptr<Executor> executor;
  std::unique_ptr<ThreadPool> pool;           // host sampling
  std::unique_ptr<kv::HostKVTier> host_tier;  // --kv-offloading-size; before the manager using it
  std::unique_ptr<kv::KVCacheManager> kv_manager;
  std::unique_ptr<HostKVTransfer> host_transfer;  // with host_tier
  std::unique_ptr<KVConnector> kv_connector;      // --kv-transfer-config
  std::unique_ptr<scheduler::Scheduler> scheduler;
  StepPlanner planner;
  const std::optional<Tokenizer>* tokenizer = nullptr;

  // Shared with client threads.
  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::pair<std::shared_ptr<ActiveRequest>, std::vector<int32_t>>> incoming;
  std::vector<std::string> aborts;
  std::unordered_map<std::string, bool> live_ids;  // ids submitted and not yet finished
  // Bi-directional KV (engine_kv_return.cc): imports asked for by EngineCore::import_kv.
  struct KVImport {
    KVTransferParams params;
    std::string cache_salt;
    std::function<void(KVImportResult)> done;
  };
  std::deque<KVImport> incoming_imports;
  bool stopping = false;
  EngineStats stats;
  uint64_t next_request_number = 0;

  // Engine-thread state.
  std::unordered_map<std::string, std::shared_ptr<ActiveRequest>> requests;
  std::unordered_map<kv::RequestId, Completion> completions;
  // Beam search: each live beam's sequence -> its request (beams have no Completion).
  std::unordered_map<kv::RequestId, std::shared_ptr<ActiveRequest>> beam_seqs;
  kv::RequestId next_kv_id = 1;
  // Bi-directional KV (engine_kv_return.cc). A finished return_kv turn whose blocks are held (by
  // a KV cache reference under `holder`) until no step is in flight, when they are exported and
  // its final output, with the hand-off, is pushed.
  struct HeldTurn {
    kv::RequestId holder = 0;
    std::shared_ptr<ActiveRequest> request;
    std::vector<int32_t> tokens;  // [blocks * block_size]: the tokens the held blocks hold
    RequestOutput out;            // the final output, pushed once exported
  };
  std::vector<HeldTurn> held_turns;
  // Requests that a completed step finished by length (the scheduler frees their blocks at once,
  // before their last tokens are emitted): held there, moved to held_turns by finish().
  std::unordered_map<kv::RequestId, HeldTurn> pre_held;
  std::unordered_map<kv::RequestId, KVImport> imports;  // pulls under way, by their pull id
  // Imports whose blocks arrived, placed when no step is in flight.
  std::vector<std::pair<KVImport, std::shared_ptr<kv_transfer::ExportedKV>>> arrived_imports;
  std::mt19937_64 seed_source;
  int64_t prompt_tokens = 0, generation_tokens = 0, num_steps = 0;
  int64_t in_flight_prompt_tokens = 0;  // prompt tokens that the step in flight computes
  IterationTokens iteration_tokens;
  int max_spec_tokens = 0;   // K: speculative_config's num_speculative_tokens (or the hook's)
  bool draft_model = false;  // speculative_config's method is draft_model (the executor drafts)
  // The executor's draft model drafts greedily (its argmax: q one-hot), as vLLM V1's drafters do:
  // on a device executor, where the drafts are then drawn on the device and the target's rows
  // stay device draws (no [rows, vocab] logits to the host). Elsewhere a sampled request's drafts
  // are sampled from q and verified with min(1, p / q) on the host.
  bool greedy_drafts = false;
  SpeculationCounters spec_counters;
  // Adaptive speculation length: measured decode-step costs (speculative_config.adaptive).
  std::optional<SpeculationCosts> spec_costs;
  int steps_since_probe = 0;  // propose_drafts calls since a request last probed (spec_costs)
  // The step in flight, when decode-shaped (every request computes its last token and its
  // drafts): its batch, longest draft run and launch time, timed into spec_costs on completion.
  struct StepCost {
    bool decode = false;
    int batch = 0;
    int k = 0;
    std::chrono::steady_clock::time_point launched;
  } in_flight_cost;
  std::thread thread;
  // Structured outputs: made on the first constrained request (the token bytes of a 128k
  // vocabulary take ~0.1 s), shared by every request after it; thread-safe.
  std::mutex grammars_mutex;
  std::unique_ptr<structured::GrammarCompiler> grammars;
  structured::GrammarCompiler& grammar_compiler(const Tokenizer& tok) {
    std::lock_guard lock(grammars_mutex);
    if (!grammars) {
      grammars =
          std::make_unique<structured::GrammarCompiler>(structured::Vocabulary::from_tokenizer(
              tok, static_cast<int32_t>(config().vocab_size), config().eos_token_ids));
    }
    return *grammars;
  }

  explicit Impl(const EngineArgs& a) : args(a), seed_source(a.seed) {}
  [[nodiscard]] const ModelConfig& config() const { return executor->config(); }

  // The step the device is running (launched, not yet completed) and the tokens of the step
  // before it, emitted while the device runs.
  std::optional<scheduler::SchedulerOutput> in_flight;
  struct Emit {
    kv::RequestId id;
    SampledToken token;
    bool length_finished;  // the request's last token before max_tokens
  };
  std::vector<Emit> to_emit;
  EngineStats::StepTimes times;
  bool completing_decode_step = false;  // the step in flight computes one token per request

  void loop();
  void admit(std::shared_ptr<ActiveRequest> request, std::vector<int32_t> prompt);
  /// Consumer: the pulls that ended since the last turn; each request joins the waiting queue
  /// with its received blocks, or none (a local prefill) when the pull failed.
  void take_kv_arrivals();
  /// Producer: exports the prompt KV of the do_remote_decode requests whose prompt `out`
  /// computed (before update_from_output can free their blocks).
  void export_remote_decodes(const scheduler::SchedulerOutput& out);
  // Bi-directional KV (engine_kv_return.cc).
  /// In finish(), before the request's blocks are freed: holds a return_kv turn's full blocks for
  /// run_kv_returns() (or takes those pre_hold_turns() held), or releases them on an abort.
  /// False when nothing is held (an abort, no full block computed, or no blocks: preempted).
  bool keep_turn(kv::RequestId id, const Completion& c, bool aborted);
  /// Before update_from_output: holds the blocks of the return_kv requests that `new_tokens`
  /// finish by length, with those tokens.
  void pre_hold_turns(
      const std::vector<std::pair<kv::RequestId, std::vector<int32_t>>>& new_tokens);
  /// A reference under a new holder id on the full blocks of request `id` that hold `tokens`
  /// (all but the last token have their KV computed); nullopt when there is none.
  std::optional<HeldTurn> hold_blocks(kv::RequestId id, std::span<const int32_t> tokens,
                                      const std::shared_ptr<ActiveRequest>& request);
  /// With no step in flight: exports the held turns (their final outputs go out with the
  /// hand-off) and places the arrived imports in the prefix cache.
  void run_kv_returns();
  /// Starts the pull of an import (engine thread).
  void start_import(KVImport import);
  /// An import's pull ended (take_kv_arrivals); false when `arrival` is not an import's.
  bool take_import_arrival(KVConnector::Arrival& arrival);
  /// Shutdown: the held turns' outputs go out without a hand-off, the imports fail.
  void release_kv_returns();
  /// Pushes a finished request's last output and closes its stream.
  void close_request(const std::shared_ptr<ActiveRequest>& a, RequestOutput out);
  void launch_step();
  /// The structured-output masks of a plan's constrained rows (RowDraw::allowed).
  void fill_masks(const scheduler::SchedulerOutput& out, StepPlan& plan);
  void complete_step();
  void record_prompt_logprobs(const scheduler::ScheduledRequest& s, StepResult& result,
                              int32_t first_row);
  /// Samples request i of a completed step: its sampled row, and one more row per draft accepted.
  void bench_override(const Completion& c, size_t index, int32_t draft, SampledToken& t,
                      bool& accepted) const;
  void sample_request(const scheduler::SchedulerOutput& out, StepResult& result, size_t i,
                      std::vector<SampledToken>& tokens);
  /// Asks the speculative proposer for the next step's drafts of the requests that just sampled.
  void propose_drafts(const scheduler::SchedulerOutput& out);
  [[nodiscard]] bool live_completion(kv::RequestId id) const { return completions.count(id) != 0; }
  void emit_pending();
  void fail_all(const std::string& error);
  /// An error while processing one request fails that request alone: its completions end with
  /// the error (held-back text is dropped) and its KV blocks are freed; the others go on.
  void fail_request(const std::string& id, const std::string& what);
  /// The test-only fault hook (EngineArgs::fault_hook) at `stage` of request `id`.
  void fault_point(RequestStage stage, const std::string& id) const {
    if (args.fault_hook) args.fault_hook(stage, id);
  }
  void emit_token(kv::RequestId id, const SampledToken& token, bool length_finished);
  // Beam search (engine_beam.cc).
  /// Queues a beam-search request as its first sequence `kv_id` (the prompt).
  void admit_beam(const std::shared_ptr<ActiveRequest>& request, kv::RequestId kv_id);
  /// Keeps the log-softmax row of each beam sequence whose step sampled.
  void collect_beam_rows(const scheduler::SchedulerOutput& out, StepResult& result);
  /// After update_from_output: a step of each beam group whose live beams all have their row.
  void step_beam_groups(const scheduler::SchedulerOutput& out);
  void beam_step(const std::shared_ptr<ActiveRequest>& request);
  /// Ends a beam group: its sequences are freed; with an error every choice is an abort,
  /// otherwise the W hypotheses are pushed best first.
  void finish_beam_group(const std::shared_ptr<ActiveRequest>& request, const std::string* error);
  /// Frees one beam's sequence.
  void drop_beam(kv::RequestId id);
  void finish(kv::RequestId id, FinishReason reason, std::string stop_reason, std::string error,
              RequestOutput out, bool flush_text = true);
  void abort_request(const std::string& id, const std::string& error, bool flush_text = true);
  void publish_stats();
};

}  // namespace pagoda
