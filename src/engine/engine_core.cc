#include "engine/engine_core.h"
#include "engine/engine_impl.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>

#include "core/logging.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/constrained_decoding.h"
#include "engine/draw_inputs.h"
#include "engine/kv_pool_sizing.h"
#include "engine/step_planner.h"
#include "engine/stop_checker.h"
#include "kv/kv_cache_config.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_cache_spec.h"
#include "model/model.h"
#include "runtime/executor.h"
#include "sampling/bad_words.h"
#include "sampling/sampler.h"
#include "scheduler/scheduler.h"
#include "structured/grammar_compiler.h"
#include "structured/vocabulary.h"
#include "tokenizer/streaming_detokenizer.h"

namespace pagoda {

using scheduler::RequestStatus;

EngineCore::EngineCore(const EngineArgs& args) : impl_(std::make_unique<Impl>(args)) {
  namespace fs = std::filesystem;
  Impl& e = *impl_;
  LoadOptions load;
  if (args.load_format == "dummy") {
    load.format = LoadFormat::kDummy;
  } else if (args.load_format != "auto" && args.load_format != "safetensors") {
    throw InvalidArgument(
        fmt::format("--load-format '{}' must be auto, safetensors or dummy", args.load_format));
  }
  if (args.dtype != "auto") {
    load.dtype = dtype_from_torch_name(args.dtype);
    if (!load.dtype)
      throw InvalidArgument(
          fmt::format("--dtype '{}' must be auto, float32, bfloat16 or float16", args.dtype));
  }
  load.seed = args.seed;
  load.runtime = args.runtime;
  load.runtime.cuda_graphs = args.runtime.cuda_graphs && !args.enforce_eager;
  load.definition.max_model_len = args.max_model_len;
  load.definition.quantization = args.quantization;
  load.definition.dummy_weights = load.format == LoadFormat::kDummy;
  if (args.cpu_bf16_matmul != "exact" && args.cpu_bf16_matmul != "round")
    throw InvalidArgument(
        fmt::format("--cpu-bf16-matmul '{}' must be exact or round", args.cpu_bf16_matmul));
  load.cpu_bf16_round = args.cpu_bf16_matmul == "round";
  if (args.cpu_matmul != "batch-invariant" && args.cpu_matmul != "onednn")
    throw InvalidArgument(
        fmt::format("--cpu-matmul '{}' must be batch-invariant or onednn", args.cpu_matmul));
  load.cpu_onednn = args.cpu_matmul == "onednn";
  (void)kv::parse_kv_cache_dtype(args.kv_cache_dtype);  // InvalidArgument naming the flag
  load.kv_cache = KVCacheOptions{args.kv_cache_dtype, args.calculate_kv_scales};
  load.progress = args.load_progress;
  ExecutorOptions executor_options;
  executor_options.model_dir = args.model;
  executor_options.load = load;
  executor_options.device = args.device;
  executor_options.num_threads = args.num_threads;
  executor_options.backend = args.distributed_executor_backend;
  executor_options.tensor_parallel_size = args.tensor_parallel_size;
  executor_options.decode_context_parallel_size = args.decode_context_parallel_size;
  if (args.tensor_parallel_size > 1 && args.kv_offloading_bytes > 0) {
    throw InvalidArgument(fmt::format(
        "--kv-offloading-size with --tensor-parallel-size {}: the host KV tier moves one rank's "
        "blocks only (set --kv-offloading-size 0)",
        args.tensor_parallel_size));
  }
  if (args.speculative_config && drafts_in_executor(args.speculative_config->method)) {
    validate_speculative_config(*args.speculative_config);
    const std::string& draft = args.speculative_config->model;
    if (!fs::is_directory(draft)) {
      throw InvalidArgument(
          fmt::format("speculative_config.model '{}' is not a model directory", draft));
    }
    // The target's load options (dtype, --load-format, CPU matmuls) but --quantization, which
    // names the target's format (speculative_config.quantization names the draft's); dummy weights
    // of their own seed (--seed + 1), so that a dummy draft of the target's shape differs from the
    // target.
    executor_options.draft_model_dir = draft;
    executor_options.draft_method = args.speculative_config->method;
    executor_options.draft_load = load;
    executor_options.draft_load.seed = args.seed + 1;
    // The draft checkpoint's own format, or speculative_config's quantization (vLLM's key).
    executor_options.draft_load.definition.quantization = args.speculative_config->quantization;
    if (args.speculative_config->enforce_eager)
      executor_options.draft_load.runtime.cuda_graphs = false;
  }
  e.executor = make_executor(executor_options);
  e.pool = std::make_unique<ThreadPool>(args.num_threads);
  const ModelConfig& config = e.executor->config();
  if (!args.tokenizer.empty()) {
    tokenizer_ = Tokenizer::load(args.tokenizer);
  } else if (fs::exists(fs::path(args.model) / "tokenizer.json")) {
    tokenizer_ = Tokenizer::load(args.model);
  }
  e.tokenizer = &tokenizer_;

  // The model's context: max_position_embeddings, extended by the RoPE scalings that extend it
  // (linear, dynamic, YaRN), as vLLM derives it.
  const int64_t context = rope_context_length(config.rope);
  max_model_len_ = args.max_model_len > 0 ? args.max_model_len : context;
  if (max_model_len_ > context) {
    throw InvalidArgument(
        fmt::format("--max-model-len {} exceeds the model's context {} (max_position_embeddings{})",
                    max_model_len_, context,
                    context == config.max_position_embeddings ? "" : " with its RoPE scaling"));
  }
  if (args.block_size < 1 || args.block_size > 1024) {
    throw InvalidArgument(
        fmt::format("--block-size must be in [1, 1024], got {}", args.block_size));
  }
  // With a draft model the pool holds both models' KV per token (one block table for both).
  const ExecutorInfo& info = e.executor->info();
  const kv::KVCacheSpec& kv_spec = info.kv_spec;
  const int64_t kv_bytes_per_token =
      info.kv_spec.bytes_per_token() +
      (info.draft_kv_spec ? info.draft_kv_spec->bytes_per_token() : int64_t{0});
  if (info.draft_kv_spec && max_model_len_ > info.draft_context) {
    throw InvalidArgument(fmt::format(
        "speculative_config.model: the draft's context {} is shorter than the max model length {} "
        "(set --max-model-len)",
        info.draft_context, max_model_len_));
  }
  // A GPU model: vLLM's profile run first (its first steps would otherwise pay the allocations
  // and the lazy kernel loads), so that the KV pool is sized from what the largest step really
  // uses. It needs a pool of two blocks (the null block and one).
  const bool on_device = e.executor->info().on_device;
  const int64_t profile_tokens = std::min<int64_t>(
      args.max_num_batched_tokens, static_cast<int64_t>(args.max_num_seqs) * max_model_len_);
  double warm_up_seconds = 0;
  if (on_device) {
    e.executor->init_kv_cache(2, args.block_size);
    warm_up_seconds +=
        e.executor->profile_run(profile_tokens, args.max_num_seqs, max_model_len_, args.block_size);
  }
  const int64_t kv_memory = kv_pool_bytes(args, *e.executor);
  // -dcp D: blocks of block_size * D tokens, block_size on each rank (model/context_parallel.h).
  const int dcp = std::max(1, args.decode_context_parallel_size);
  const int block_size = args.block_size * dcp;
  const int num_blocks = kv::num_blocks_for_memory(kv_memory, args.block_size, kv_bytes_per_token);
  kv::KVCacheConfig kv_config{num_blocks, block_size, args.enable_prefix_caching};
  e.host_tier = make_host_tier(args, e.executor->info().kv_spec);
  e.kv_manager = std::make_unique<kv::KVCacheManager>(kv_config, e.host_tier.get());
  e.executor->init_kv_cache(num_blocks, block_size);
  if (e.host_tier) {
    e.host_transfer = std::make_unique<HostKVTransfer>(*e.host_tier, *e.kv_manager, *e.executor);
  }
  if (args.kv_transfer_config) {
    e.kv_connector = make_kv_connector(args, e.config(), info, *e.executor, *e.kv_manager, [&e] {
      { std::lock_guard lock(e.mutex); }  // the loop is waiting, or will see the arrival
      e.wake.notify_all();
    });
  }
  kv_capacity_tokens_ =
      static_cast<int64_t>(num_blocks - 1) * block_size;  // block 0 is the null block
  cache_info_ = {block_size,
                 num_blocks,
                 args.enable_prefix_caching,
                 args.gpu_memory_utilization,
                 std::max<int64_t>(args.kv_cache_memory_bytes, 0),
                 e.config().sliding_window,
                 kv::kv_cache_dtype_name(kv_spec.dtype),
                 args.calculate_kv_scales,
                 args.kv_offloading_bytes,
                 e.host_tier ? e.host_tier->capacity_blocks() : 0};
  if (on_device) {
    const auto start = std::chrono::steady_clock::now();
    const int graphs = e.executor->capture_graphs(args.max_num_seqs);
    warm_up_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("warm-up: profile run of {} tokens, {} decode graphs: {:.0f} ms", profile_tokens,
                 graphs, 1e3 * warm_up_seconds);
  }

  scheduler::SchedulerConfig sched;
  sched.max_num_batched_tokens = args.max_num_batched_tokens;
  sched.max_num_seqs = args.max_num_seqs;
  sched.max_model_len = max_model_len_;
  if (args.speculative_config) {
    validate_speculative_config(*args.speculative_config);
    if (args.speculative_proposer)
      throw InvalidArgument("speculative_config and speculative_proposer exclude each other");
    e.max_spec_tokens = args.speculative_config->num_speculative_tokens;
    e.draft_model = drafts_in_executor(args.speculative_config->method);
    e.greedy_drafts = e.draft_model && on_device;
    // Measured costs on a device only: there every draft is one-hot (n-gram, greedy_drafts) and
    // each row's draw is keyed by (seed, token index), so a length chosen from timings never
    // changes a seeded request's tokens. The host's min(1, p / q) verification draws from the
    // request's stream per draft, so there the length follows the fixed prior 1 + c k and runs
    // repeat exactly.
    if (args.speculative_config->adaptive && on_device)
      e.spec_costs.emplace(e.max_spec_tokens, args.speculative_config->draft_row_cost);
  } else if (args.speculative_proposer) {
    e.max_spec_tokens = std::max(args.num_speculative_tokens, 0);
  }
  sched.num_lookahead_tokens = e.max_spec_tokens;
  e.spec_counters.accepted_per_pos.assign(static_cast<size_t>(e.max_spec_tokens), 0);
  if (args.scheduling_policy == "priority") {
    sched.policy = scheduler::SchedulingPolicy::kPriority;
    priority_scheduling_ = true;
  } else if (args.scheduling_policy != "fcfs") {
    throw InvalidArgument(
        fmt::format("--scheduling-policy '{}' must be fcfs or priority", args.scheduling_policy));
  }
  e.scheduler = std::make_unique<scheduler::Scheduler>(sched, *e.kv_manager);
  spdlog::info(
      "KV cache{}: {} ({} bytes per token), {} blocks of {} tokens = {} tokens ({:.1f} MiB), max "
      "model length {}",
      args.tensor_parallel_size > 1
          ? fmt::format(" per rank of {} ({} of {} KV heads each{})", args.tensor_parallel_size,
                        kv_spec.num_kv_heads, e.config().num_kv_heads,
                        dcp > 1 ? fmt::format("; -dcp {}: 1 of every {} tokens", dcp, dcp) : "")
          : std::string(),
      kv::kv_cache_dtype_name(kv_spec.dtype), kv_bytes_per_token, num_blocks - 1, block_size,
      kv_capacity_tokens_,
      static_cast<double>(num_blocks) * args.block_size * kv_bytes_per_token / (1 << 20),
      max_model_len_);
  e.thread = std::thread([this] { impl_->loop(); });
}

EngineCore::~EngineCore() { shutdown(); }

void EngineCore::shutdown() {
  if (!impl_ || !impl_->thread.joinable()) return;
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
  if (impl_->spec_costs) {
    const std::string costs = impl_->spec_costs->describe();
    if (!costs.empty()) spdlog::info("speculation: measured decode step costs: {}", costs);
  }
}

const ModelConfig& EngineCore::model_config() const { return impl_->config(); }

int64_t EngineCore::vocab_size() const { return impl_->config().vocab_size; }

int EngineCore::kv_transfer_port() const {
  return impl_->kv_connector ? impl_->kv_connector->port() : 0;
}

bool EngineCore::kv_transfer_enabled() const { return impl_->kv_connector != nullptr; }

uint64_t EngineCore::kv_transfer_fingerprint() const {
  return impl_->kv_connector ? impl_->kv_connector->fingerprint() : 0;
}

std::string EngineCore::fatal_error() const {
  return impl_->executor ? impl_->executor->failure() : std::string{};
}

EngineStats EngineCore::stats() const {
  EngineStats s;
  {
    std::lock_guard lock(impl_->mutex);
    s = impl_->stats;
  }
  // The producer's counters move on the transfer server's thread, between engine steps too.
  if (impl_->kv_connector) impl_->kv_connector->fill_producer_stats(s);
  return s;
}

std::shared_ptr<OutputStream> EngineCore::submit(EngineRequest r) {
  const ModelConfig& config = model_config();
  std::vector<int32_t> prompt;
  if (r.prompt) {
    if (!tokenizer_)
      throw InvalidArgument("prompt: this model has no tokenizer; send prompt_token_ids");
    prompt = tokenizer_->encode(*r.prompt, r.add_special_tokens);
  } else {
    prompt = std::move(r.prompt_token_ids);
  }
  if (prompt.empty()) throw InvalidArgument("prompt must contain at least one token");
  for (int32_t id : prompt) {
    if (id < 0 || id >= config.vocab_size) {
      throw InvalidArgument(fmt::format("prompt token id {} is outside the vocabulary [0, {})", id,
                                        config.vocab_size));
    }
  }
  if (!r.params.bad_words.empty()) {
    if (!tokenizer_) throw InvalidArgument("bad_words: words need a tokenizer");
    r.params.bad_words_token_ids =
        bad_words_token_ids(r.params.bad_words, [this](const std::string& text) {
          return tokenizer_->encode(text, /*add_special_tokens=*/false);
        });
  }
  check_kv_transfer_request(impl_->kv_connector.get(), r);
  r.params.validate(config.vocab_size);
  if (r.priority != 0 && !priority_scheduling_) {
    throw InvalidArgument(fmt::format(
        "priority: got priority {} but priority scheduling is not enabled (--scheduling-policy "
        "priority)",
        r.priority));
  }
  std::optional<RequestConstraint> constraint;
  if (r.params.structured_outputs) {
    if (!tokenizer_) throw InvalidArgument("structured_outputs: needs the model's tokenizer");
    constraint = resolve_constraint(*r.params.structured_outputs,
                                    impl_->grammar_compiler(*tokenizer_), *tokenizer_, prompt);
  }
  if (!r.params.stop.empty() && !tokenizer_)
    throw InvalidArgument("stop: strings need a tokenizer; use stop_token_ids");
  const int64_t total = static_cast<int64_t>(prompt.size()) + r.params.max_tokens;
  if (total > max_model_len_) {
    throw InvalidArgument(
        fmt::format("this model's maximum context length is {} tokens, but the request asks for {} "
                    "tokens ({} in the prompt + "
                    "{} max_tokens)",
                    max_model_len_, total, prompt.size(), r.params.max_tokens));
  }
  auto request = std::make_shared<ActiveRequest>();
  request->params = std::move(r.params);
  request->priority = r.priority;
  request->cache_salt = std::move(r.cache_salt);
  request->stream = std::make_shared<OutputStream>();
  request->num_unfinished = request->params.n;
  request->submitted = std::chrono::steady_clock::now();
  request->constraint = std::move(constraint);
  request->do_remote_decode = r.do_remote_decode;
  request->do_remote_prefill = r.do_remote_prefill;
  request->remote = std::move(r.remote);
  request->return_kv = r.return_kv;
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) throw Unavailable("the engine is shutting down");
    request->id =
        r.request_id.empty() ? fmt::format("req-{}", impl_->next_request_number++) : r.request_id;
    if (!impl_->live_ids.emplace(request->id, true).second) {
      throw InvalidArgument(fmt::format("request_id '{}' is already in use", request->id));
    }
    impl_->incoming.emplace_back(request, std::move(prompt));
  }
  impl_->wake.notify_all();
  return request->stream;
}

void EngineCore::abort(const std::string& request_id) {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->aborts.push_back(request_id);
  }
  impl_->wake.notify_all();
}

// One iteration: complete the step on the device (its tokens update the scheduler), schedule
// and launch the next, then emit the completed step's tokens while the device runs the next one
// (vLLM's async scheduling does the same). A request that an emitted token finishes (EOS, a stop
// string) was already scheduled in the launched step: that row's token is dropped when the step
// completes, and its blocks, freed now, are reused only by steps launched after it.
void EngineCore::Impl::loop() {
  for (;;) {
    decltype(incoming) new_requests;
    decltype(incoming_imports) new_imports;
    std::vector<std::string> new_aborts;
    bool stop = false;
    {
      std::unique_lock lock(mutex);
      wake.wait(lock, [&] {
        return stopping || !incoming.empty() || !aborts.empty() || in_flight.has_value() ||
               scheduler->has_schedulable_requests() ||
               (kv_connector && (kv_connector->has_arrivals() || !incoming_imports.empty() ||
                                 !held_turns.empty() || !arrived_imports.empty()));
      });
      new_requests.swap(incoming);
      new_imports.swap(incoming_imports);
      new_aborts.swap(aborts);
      stop = stopping;
    }
    for (auto& [request, prompt] : new_requests) admit(std::move(request), std::move(prompt));
    for (const std::string& id : new_aborts) abort_request(id, "");
    for (KVImport& import : new_imports) start_import(std::move(import));
    if (kv_connector) take_kv_arrivals();
    if (stop) {
      fail_all("the engine shut down");
      if (kv_connector) release_kv_returns();
      publish_stats();
      return;
    }
    try {
      // complete_step() adds its wait for the device to device_wait_seconds; the rest of this
      // block is host work the device waits for.
      const auto t0 = std::chrono::steady_clock::now();
      const double waited_before = times.device_wait_seconds;
      const bool decode_step = in_flight && completing_decode_step;
      if (in_flight) complete_step();
      if (kv_connector) run_kv_returns();  // no step in flight here
      if (scheduler->has_schedulable_requests()) launch_step();
      const double waited = times.device_wait_seconds - waited_before;
      const double serial =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - waited;
      times.host_serial_seconds += serial;
      if (decode_step) {
        ++times.num_decode_steps;
        times.decode_device_wait_seconds += waited;
        times.decode_host_serial_seconds += serial;
      }
    } catch (const std::exception& e) {
      // A failed step fails the requests in flight, never the engine.
      spdlog::error("engine step failed: {}", e.what());
      fail_all(fmt::format("engine error: {}", e.what()));
    }
    const auto t2 = std::chrono::steady_clock::now();
    emit_pending();
    times.emit_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
    publish_stats();
  }
}

void EngineCore::Impl::fail_all(const std::string& error) {
  if (executor->in_flight()) {
    try {
      (void)executor->wait();  // the device must be done with the blocks before they are freed
    } catch (const std::exception& e) {
      spdlog::error("engine step failed: {}", e.what());
    }
  }
  in_flight.reset();
  to_emit.clear();
  std::vector<std::string> ids;
  for (const auto& [id, r] : requests) ids.push_back(id);
  for (const std::string& id : ids) abort_request(id, error);
}

void EngineCore::Impl::fail_request(const std::string& id, const std::string& what) {
  spdlog::error("engine: request {} failed: {}", id, what);
  abort_request(id, fmt::format("engine error: {}", what), /*flush_text=*/false);
}

void EngineCore::Impl::emit_pending() {
  for (Emit& e : to_emit) {
    try {
      emit_token(e.id, e.token, e.length_finished);
    } catch (const std::exception& ex) {
      if (auto it = completions.find(e.id); it != completions.end()) {
        fail_request(std::string(it->second.request->id), ex.what());
      }
    }
  }
  to_emit.clear();
}

void EngineCore::Impl::admit(std::shared_ptr<ActiveRequest> request, std::vector<int32_t> prompt) {
  request->prompt = std::move(prompt);
  const kv::RequestId kv_id = next_kv_id++;
  try {
    fault_point(RequestStage::kAdmit, request->id);
    std::string salt = request->cache_salt;
    // Prompt log-probabilities need every prompt position computed, so such a request reads no
    // cached blocks: a salt of its own keeps it apart (vLLM skips the cache for them too).
    if (request->params.prompt_logprobs) salt += fmt::format("\x1fprompt_logprobs:{}", kv_id);
    if (request->params.use_beam_search) {
      admit_beam(request, kv_id);
      return;
    }
    auto r = std::make_unique<scheduler::Request>(
        kv_id, request->prompt, request->params.max_tokens, request->priority, salt);
    Completion c{request, 0, RequestSampler(request->params, config().eos_token_ids, seed_source()),
                 std::nullopt, StopChecker(request->params.stop)};
    c.device_seed = request->params.seed.value_or(seed_source());
    c.draw_inputs =
        DrawInputs(request->params, request->prompt, config().eos_token_ids, config().vocab_size);
    if (request->constraint) c.constraint.decoding.emplace(*request->constraint);
    if (tokenizer->has_value()) {
      c.detok.emplace(**tokenizer, request->params.skip_special_tokens, request->prompt);
    }
    if (request->do_remote_prefill) r->set_waiting_for_remote_kv();
    scheduler->add_request(std::move(r));  // the last step that may throw: nothing to undo
    request->completion_ids.push_back(kv_id);
    requests[request->id] = request;
    completions.emplace(kv_id, std::move(c));
    if (request->do_remote_prefill) kv_connector->start_pull(kv_id, request->remote);
  } catch (const std::exception& e) {
    RequestOutput failed;
    failed.request_id = request->id;
    failed.finish_reason = FinishReason::kAbort;
    failed.error = e.what();
    request->stream->push(std::move(failed));
    request->stream->close();
    std::lock_guard lock(mutex);
    live_ids.erase(request->id);
  }
}

void EngineCore::Impl::launch_step() {
  scheduler::SchedulerOutput out = scheduler->schedule();
  if (out.scheduled.empty()) {
    // Nothing fits right now (it can only be transient); avoid spinning.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  StepPlan plan = planner.plan(out, *scheduler, *kv_manager);
  std::vector<std::pair<std::string, std::string>> failed;  // request id, what
  int64_t step_prompt_tokens = 0;
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const scheduler::ScheduledRequest& s = out.scheduled[i];
    const scheduler::Request* r = scheduler->get(s.id);
    if (s.num_computed_tokens < r->num_prompt_tokens()) {
      const int64_t step_prompt =
          std::min(s.num_new_tokens, r->num_prompt_tokens() - s.num_computed_tokens);
      prompt_tokens += step_prompt;
      step_prompt_tokens += step_prompt;
    }
    if (const auto beam = beam_seqs.find(s.id); beam != beam_seqs.end()) {
      // A beam's row comes back as logits: the engine's search chooses its tokens.
      ActiveRequest& a = *beam->second;
      try {
        fault_point(RequestStage::kSchedule, a.id);
      } catch (const std::exception& e) {
        failed.emplace_back(a.id, e.what());
      }
      if (!a.first_scheduled) a.first_scheduled = std::chrono::steady_clock::now();
      if (s.samples) plan.seqs[i].rows.emplace_back();
      continue;
    }
    Completion& c = completions.at(s.id);
    ActiveRequest& a = *c.request;
    // The rows of a step (runtime/step.h): every new token's with prompt log-probabilities (their
    // logits come back), else the sampled token's and one per draft it verifies.
    std::vector<RowDraw>& rows = plan.seqs[i].rows;
    try {
      fault_point(RequestStage::kSchedule, a.id);
      if (!a.first_scheduled) a.first_scheduled = std::chrono::steady_clock::now();
      const bool prompt_logits =
          a.params.prompt_logprobs.has_value() && s.num_computed_tokens < r->num_prompt_tokens();
      if (prompt_logits) {
        rows.resize(static_cast<size_t>(s.num_new_tokens));
        if (s.samples) rows.back() = RowDraw::from(device_draw(c, *r));
      } else if (s.samples) {
        RowDraw draw = RowDraw::from(device_draw(c, *r));
        // Draft-model drafts (placeholders now; constrained requests draft by jump-forward): the
        // executor's draft model draws them with this draw. A sampled draft comes with its q, so
        // its rows come back as logits and are verified on the host with min(1, p / q). Greedy
        // drafts (greedy_drafts) are one-hot: the rows keep their draws (sample_request).
        if (draft_model && s.num_spec_tokens > 0 && !c.constraint.decoding) {
          PAGODA_CHECK(draw.temperature >= 0, "request {}: draft-model drafts without a draw",
                       a.id);
          plan.seqs[i].propose = true;
          plan.seqs[i].draft_draw = draw;
          if (greedy_drafts) {
            plan.seqs[i].draft_draw.temperature = 0;
          } else if (draw.temperature > 0) {
            draw = RowDraw{};
          }
        }
        // Row j's draw must see drafts 0..j-1 in its history. A device draw is built from the
        // completion's output alone, so a request whose draws read their history and that
        // verifies drafts gets its rows back as logits, drawn by its host sampler (one
        // [vocab] fp32 row per token, ~0.5 ms of host time at 128k; a device kernel that
        // applies the drafts is to come).
        if (s.num_spec_tokens > 0 && draws_read_history(a.params, r->num_output_tokens()))
          draw = RowDraw{};
        for (int j = 0; j <= s.num_spec_tokens; ++j) {
          rows.push_back(draw);
          if (draw.temperature >= 0) rows.back().counter += static_cast<uint64_t>(j);
        }
      }
    } catch (const std::exception& e) {
      // The step still computes its tokens, unsampled (the blocks they fill may be in the prefix
      // cache already); the request fails once the step is launched, like an abort in flight.
      failed.emplace_back(a.id, e.what());
      rows.clear();
    }
  }
  // The structured-output masks are computed while the device runs the forward pass (in-process
  // executors) or just before the plan is sent (worker process); called inside launch() below.
  const bool constrained = std::any_of(out.scheduled.begin(), out.scheduled.end(), [&](auto& s) {
    const auto it = completions.find(s.id);
    return s.samples && it != completions.end() && it->second.constraint.active();
  });
  if (constrained) plan.fill_late = [this, &out](StepPlan& p) { fill_masks(out, p); };
  completing_decode_step = std::all_of(out.scheduled.begin(), out.scheduled.end(),
                                       [](const auto& s) { return s.num_new_tokens == 1; });
  const auto launch_start = std::chrono::steady_clock::now();
  in_flight_cost = StepCost{};
  if (spec_costs) {
    in_flight_cost.decode = std::all_of(out.scheduled.begin(), out.scheduled.end(), [](auto& s) {
      return s.samples && s.num_new_tokens == 1 + s.num_spec_tokens;
    });
    in_flight_cost.batch = static_cast<int>(out.scheduled.size());
    for (const auto& s : out.scheduled)
      in_flight_cost.k = std::max(in_flight_cost.k, s.num_spec_tokens);
    in_flight_cost.launched = launch_start;
  }
  // The host KV tier's copies: the blocks this schedule evicted out, its host hits in.
  if (host_transfer) host_transfer->before_launch();
  // Received prompt blocks in (after the host tier's saves have read any block they reuse).
  if (kv_connector) kv_connector->before_launch();
  executor->launch(std::move(plan));
  times.launch_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - launch_start).count();
  in_flight = std::move(out);
  in_flight_prompt_tokens = step_prompt_tokens;
  for (const auto& [id, what] : failed) fail_request(id, what);
}

void EngineCore::Impl::emit_token(kv::RequestId id, const SampledToken& token,
                                  bool length_finished) {
  auto it = completions.find(id);
  if (it == completions.end()) return;
  Completion& c = it->second;
  // Tokens are fed to the grammar when drawn and emitted later, several per step with drafts:
  // the one that broke the grammar is not part of the text; the one that completed it ends it.
  const int index = c.num_output_tokens + 1;  // this token's, 1-based
  if (!c.constraint.error.empty() && index >= c.constraint.error_at) {
    finish(id, FinishReason::kAbort, "", c.constraint.error, RequestOutput{});
    return;
  }
  ActiveRequest& a = *c.request;
  const SamplingParams& p = a.params;
  ++c.num_output_tokens;
  if (const scheduler::Request* r = scheduler->get(id))
    c.num_cached_tokens = r->num_cached_prompt_tokens();

  RequestOutput out;
  out.request_id = a.id;
  out.index = c.index;
  out.token_ids = {token.token};
  if (p.logprobs) out.logprobs.push_back(to_token_logprobs(token));
  out.num_prompt_tokens = static_cast<int>(a.prompt.size());
  out.num_cached_tokens = c.num_cached_tokens;
  if (c.num_output_tokens == 1 && a.first_scheduled) {
    using Seconds = std::chrono::duration<double>;
    out.queue_seconds = Seconds(*a.first_scheduled - a.submitted).count();
    out.prefill_seconds = Seconds(std::chrono::steady_clock::now() - *a.first_scheduled).count();
  }
  if (c.index == 0 && !a.prompt_logprobs_sent && p.prompt_logprobs) {
    out.prompt_logprobs = a.prompt_logprobs;
    out.prompt_logprobs.resize(a.prompt.size());
    a.prompt_logprobs_sent = true;
  }
  fault_point(RequestStage::kStopCheck, a.id);
  const bool min_reached = c.num_output_tokens >= p.min_tokens;
  const auto& eos = config().eos_token_ids;
  const bool is_eos = !p.ignore_eos && std::find(eos.begin(), eos.end(), token.token) != eos.end();
  const bool is_stop_token = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(),
                                       token.token) != p.stop_token_ids.end();
  // The token that ends the completion is not part of its text (vLLM's detokenizer leaves it out
  // too): with skip_special_tokens=false every chat answer would end in "<|im_end|>".
  const bool ends_on_token = min_reached && (is_eos || is_stop_token);
  if (c.detok && !ends_on_token) {
    fault_point(RequestStage::kDetokenize, a.id);
    out.text = c.stop.add(c.detok->add(token.token), min_reached);
  }
  fault_point(RequestStage::kEmit, a.id);
  if (c.stop.matched()) {
    finish(id, FinishReason::kStop, *c.stop.matched(), "", std::move(out));
  } else if (min_reached && (is_eos || is_stop_token)) {
    finish(id, FinishReason::kStop, is_stop_token ? std::to_string(token.token) : "", "",
           std::move(out));
  } else if (c.constraint.completed && index >= c.constraint.completed_at) {
    // The grammar's text is complete and only its end may follow: stop now (one step sooner
    // than drawing the end token, and also below min_tokens or with ignore_eos).
    finish(id, FinishReason::kStop, "", "", std::move(out));
  } else if (length_finished || c.num_output_tokens >= p.max_tokens) {
    finish(id, FinishReason::kLength, "", "", std::move(out));
  } else {
    a.stream->push(std::move(out));
  }
}

void EngineCore::Impl::finish(kv::RequestId id, FinishReason reason, std::string stop_reason,
                              std::string error, RequestOutput out, bool flush_text) {
  auto it = completions.find(id);
  if (it == completions.end()) return;
  Completion& c = it->second;
  std::shared_ptr<ActiveRequest> a = c.request;
  const RequestStatus status = reason == FinishReason::kStop     ? RequestStatus::kFinishedStopped
                               : reason == FinishReason::kLength ? RequestStatus::kFinishedLength
                                                                 : RequestStatus::kFinishedAborted;
  // Bi-directional KV: the turn's blocks are held past the free below, until they are exported.
  const bool held = a->return_kv && keep_turn(id, c, reason == FinishReason::kAbort);
  scheduler->finish_request(id, status);  // frees its KV blocks now (no-op if already finished)
  planner.forget(id);                     // and the executor forgets its block table
  if (flush_text && c.detok && !c.stop.matched()) {
    // The text held back for a possible stop string or an incomplete character comes out now,
    // unless the rest completes a stop string.
    out.text += c.stop.add(c.detok->flush());
    if (c.stop.matched()) {
      reason = FinishReason::kStop;
      stop_reason = *c.stop.matched();
    } else {
      out.text += c.stop.flush();
    }
  }
  out.request_id = a->id;
  out.index = c.index;
  out.finish_reason = reason;
  out.stop_reason = std::move(stop_reason);
  out.error = std::move(error);
  out.num_prompt_tokens = static_cast<int>(a->prompt.size());
  out.num_cached_tokens = c.num_cached_tokens;
  if (reason != FinishReason::kAbort) out.kv_transfer_params = a->transfer_out;
  if (kv_connector) kv_connector->drop(id);
  completions.erase(it);
  if (held) {
    // n is 1 (return_kv refuses n > 1): the output goes out with the hand-off once exported.
    held_turns.back().out = std::move(out);
    requests.erase(a->id);
    return;
  }
  if (--a->num_unfinished == 0) {
    requests.erase(a->id);
    close_request(a, std::move(out));
  } else {
    a->stream->push(std::move(out));
  }
}

void EngineCore::Impl::close_request(const std::shared_ptr<ActiveRequest>& a, RequestOutput out) {
  a->stream->push(std::move(out));
  publish_stats();  // a caller that saw its stream close sees the blocks freed too
  a->stream->close();
  std::lock_guard lock(mutex);
  live_ids.erase(a->id);
}

void EngineCore::Impl::abort_request(const std::string& id, const std::string& error,
                                     bool flush_text) {
  auto it = requests.find(id);
  if (it == requests.end()) return;
  std::shared_ptr<ActiveRequest> a = it->second;
  if (a->beam) {
    finish_beam_group(a, &error);
    return;
  }
  // Completions that were never forked (n > 1 aborted before its first token) finish too.
  a->num_unfinished =
      static_cast<int>(a->completion_ids.size()) -
      static_cast<int>(std::count_if(a->completion_ids.begin(), a->completion_ids.end(),
                                     [&](kv::RequestId k) { return completions.count(k) == 0; }));
  const std::vector<kv::RequestId> ids = a->completion_ids;
  for (kv::RequestId k : ids) {
    finish(k, FinishReason::kAbort, "", error, RequestOutput{}, flush_text);
  }
}

}  // namespace pagoda
