// The API server: each route parses its body with the protocol layer, submits EngineRequests and
// answers from the engine's output streams. Streams are drained on the HTTP io threads (the
// engine thread only posts), and a client that goes away has its engine requests aborted at once.
#include "server/server.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "core/logging.h"
#include "server/metrics.h"
#include "server/openai/api_error.h"
#include "server/openai/chat_request.h"
#include "server/openai/chat_response.h"
#include "server/openai/completion_request.h"
#include "server/openai/completion_response.h"
#include "server/openai/endpoints.h"
#include "server/openai/reasoning_parser.h"
#include "server/openai/request_common.h"
#include "server/openai/sse.h"
#include "server/openai/tool_parser.h"
#include "server/work_queue.h"
#include "template/chat_template.h"

namespace pagoda::server {

using Clock = std::chrono::steady_clock;

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Impl(EngineCore& engine, ServerOptions opts);
  void add_routes();
  [[nodiscard]] bool authorized(const http::HttpRequest& request) const;

  EngineCore& engine;
  ServerOptions options;
  std::optional<tmpl::ChatTemplate> chat_template;
  std::unique_ptr<openai::ToolParser> tool_parser;   // --tool-call-parser
  std::optional<openai::ReasoningFormat> reasoning;  // --reasoning-parser
  openai::ServerContext ctx;
  ServingMetrics metrics;
  http::HttpServer http;
  /// Parsing, template rendering and tokenization run here, off the io threads.
  WorkQueue workers;
  std::atomic<bool> stopping{false};
};

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

/// Compares the whole of `given` whatever it holds, so that the time taken tells an attacker
/// nothing about how much of a guess was right.
bool constant_time_equal(std::string_view given, std::string_view expected) {
  if (expected.empty()) return given.empty();
  unsigned diff = given.size() != expected.size() ? 1u : 0u;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i]) ^
            static_cast<unsigned char>(expected[i % expected.size()]);
  }
  return diff == 0;
}

http::HttpResponse api_error_response(const openai::ApiError& error) {
  http::HttpResponse response;
  response.status = error.status;
  response.body = openai::error_body(error);
  return response;
}

http::HttpResponse json_response(const openai::Json& json) {
  http::HttpResponse response;
  response.body = openai::json_body(json);
  return response;
}

/// What a finished completion adds to the metrics: its own record, and the record of its engine
/// request when it was the last of the request's n completions.
struct FinishedRecords {
  std::optional<RequestRecord> completion;
  std::optional<ParentRecord> request;
};

/// The latencies of each completion of one HTTP request (stream index x completion index), turned
/// into a RequestRecord when the completion finishes, and a ParentRecord per engine request (one
/// stream) when its last completion does.
class CompletionTimer {
 public:
  explicit CompletionTimer(Clock::time_point arrival) : arrival_(arrival) {}

  /// Stream `stream` (submitted in this order) is an engine request of these parameters.
  void add_stream(const SamplingParams& params) {
    streams_.push_back({params.n, params.max_tokens, 0, 0});
  }

  [[nodiscard]] FinishedRecords observe(size_t stream, const RequestOutput& out,
                                        Clock::time_point now) {
    Timing& t = timings_[{stream, out.index}];
    if (out.queue_seconds) t.queue = *out.queue_seconds;
    if (out.prefill_seconds) t.prefill = *out.prefill_seconds;
    t.prompt_tokens = std::max<int64_t>(t.prompt_tokens, out.num_prompt_tokens);
    if (!out.token_ids.empty()) {
      if (t.generation_tokens == 0) {
        t.first_token = now;
      } else {
        t.itl.push_back(seconds(now - t.last_token));
      }
      t.last_token = now;
      t.generation_tokens += static_cast<int64_t>(out.token_ids.size());
    }
    if (!out.finish_reason) return {};
    FinishedRecords records;
    RequestRecord& record = records.completion.emplace();
    record.finished_reason = to_string(*out.finish_reason);
    record.prompt_tokens = t.prompt_tokens;
    record.generation_tokens = t.generation_tokens;
    record.e2e_seconds = seconds(now - arrival_);
    // A completion that ended before its first token has no first-token time: it counts as e2e.
    record.ttft_seconds =
        t.generation_tokens > 0 ? seconds(t.first_token - arrival_) : record.e2e_seconds;
    record.decode_seconds = t.generation_tokens > 0 ? seconds(now - t.first_token) : 0;
    record.itl_seconds = std::move(t.itl);
    record.queue_seconds = t.queue;
    record.prefill_seconds = t.prefill;
    if (stream < streams_.size()) {
      Stream& s = streams_[stream];
      record.max_tokens_param = s.max_tokens;
      s.max_generation_tokens = std::max(s.max_generation_tokens, t.generation_tokens);
      if (++s.num_finished == s.n) records.request = ParentRecord{s.n, s.max_generation_tokens};
    }
    timings_.erase({stream, out.index});
    return records;
  }

 private:
  struct Timing {
    Clock::time_point first_token{}, last_token{};
    std::vector<double> itl;
    double queue = 0, prefill = 0;
    int64_t prompt_tokens = 0, generation_tokens = 0;
  };
  /// One engine request: its n and max_tokens, and what its finished completions generated.
  struct Stream {
    int n = 1;
    int64_t max_tokens = 0;  // tokens
    int num_finished = 0;
    int64_t max_generation_tokens = 0;  // tokens, the most of one finished completion
  };
  Clock::time_point arrival_;
  std::map<std::pair<size_t, int>, Timing> timings_;
  std::vector<Stream> streams_;  // by stream index
};

/// An engine failure (not a client abort) reported to the client: the engine's message, 503 when
/// the engine is shutting down.
openai::ApiError engine_failure(const std::string& error) {
  const bool shutting_down = error.find("shut down") != std::string::npos;
  return {shutting_down ? 503 : 500, "", error, ""};
}

/// One HTTP request's engine requests, from submit to the last byte. The engine thread's
/// listeners only schedule drain() on an io thread; drains of one call never overlap.
class EngineCall : public std::enable_shared_from_this<EngineCall> {
 public:
  EngineCall(std::shared_ptr<Server::Impl> server, std::shared_ptr<http::Responder> responder,
             Clock::time_point arrival, bool stream)
      : server_(std::move(server)),
        responder_(std::move(responder)),
        timer_(arrival),
        stream_(stream) {}
  virtual ~EngineCall() = default;

  /// Submits every request (a failure aborts those already queued and propagates), starts the
  /// stream when streaming, and wires the listeners and the disconnect abort.
  void start(std::vector<EngineRequest> requests) {
    for (EngineRequest& request : requests) {
      try {
        std::string id = request.request_id;
        const SamplingParams params = request.params;
        streams_.push_back(server_->engine.submit(std::move(request)));
        timer_.add_stream(params);
        ids_.push_back(std::move(id));
      } catch (...) {
        abort_all();
        throw;
      }
    }
    if (stream_) {
      responder_->start_stream();
      on_started();
    }
    responder_->on_disconnect([weak = weak_from_this()] {
      if (auto call = weak.lock()) call->abort_all();
    });
    for (auto& s : streams_) {
      s->set_listener([self = shared_from_this()] { self->schedule_drain(); });
    }
  }

 protected:
  /// The end of a completions or chat response, whichever builder made it: the engine's error,
  /// or the usage chunk (if asked) and [DONE] of a stream, or the whole JSON body.
  template <class Builder>
  void finish(Builder& builder, bool include_usage) {
    if (!engine_error().empty()) {
      fail(engine_failure(engine_error()));
    } else if (streaming()) {
      if (include_usage) responder().write(openai::sse_event(builder.usage_chunk()));
      responder().write(std::string(openai::kSseDone));
      responder().end();
    } else {
      responder().send(json_response(builder.response()));
    }
  }
  virtual void on_started() {}
  virtual void on_output(size_t stream, const RequestOutput& out) = 0;
  /// Every stream has closed: send the answer (or the stream's tail).
  virtual void on_finished() = 0;

  http::Responder& responder() { return *responder_; }
  [[nodiscard]] bool streaming() const { return stream_; }
  /// The first error an engine update reported ("" when none).
  [[nodiscard]] const std::string& engine_error() const { return engine_error_; }
  /// Ends a stream with an error event and [DONE] (vLLM's way), or sends an error response.
  void fail(const openai::ApiError& error) {
    if (stream_) {
      responder_->write(openai::sse_event(openai::error_json(error)));
      responder_->write(std::string(openai::kSseDone));
      responder_->end();
    } else {
      responder_->send(api_error_response(error));
    }
  }

 private:
  void schedule_drain() {
    if (scheduled_.exchange(true)) return;
    server_->http.post([self = shared_from_this()] { self->drain(); });
  }

  void drain() {
    std::lock_guard lock(drain_mutex_);
    scheduled_ = false;
    if (done_) return;
    try {
      for (size_t i = 0; i < streams_.size(); ++i) {
        while (auto out = streams_[i]->try_next()) {
          const FinishedRecords records = timer_.observe(i, *out, Clock::now());
          if (records.completion) server_->metrics.record(*records.completion);
          if (records.request) server_->metrics.record(*records.request);
          if (!out->error.empty() && engine_error_.empty()) engine_error_ = out->error;
          on_output(i, *out);
        }
      }
      if (std::all_of(streams_.begin(), streams_.end(), [](auto& s) { return s->finished(); })) {
        finish();
        on_finished();
      }
    } catch (const std::exception& e) {
      // A bug in building the answer fails this request only.
      spdlog::error("server: request {} failed: {}", ids_.empty() ? "" : ids_[0], e.what());
      finish();
      abort_all();
      if (!responder_->answered() || stream_) fail(openai::api_error_from(e));
    }
  }

  void finish() {
    done_ = true;
    for (auto& s : streams_) s->set_listener(nullptr);  // drops the listeners' hold on this call
  }

  void abort_all() {
    for (const std::string& id : ids_) server_->engine.abort(id);
  }

  std::shared_ptr<Server::Impl> server_;
  std::shared_ptr<http::Responder> responder_;
  CompletionTimer timer_;
  bool stream_;
  std::vector<std::shared_ptr<OutputStream>> streams_;
  std::vector<std::string> ids_;
  std::atomic<bool> scheduled_{false};
  std::mutex drain_mutex_;
  bool done_ = false;
  std::string engine_error_;
};

/// POST /v1/completions: one engine request per prompt, choices prompt-major.
class CompletionCall final : public EngineCall {
 public:
  CompletionCall(std::shared_ptr<Server::Impl> server, std::shared_ptr<http::Responder> r,
                 Clock::time_point arrival, const openai::CompletionRequest& request)
      : EngineCall(server, std::move(r), arrival, request.stream),
        include_usage_(request.include_usage),
        builder_(request, server->ctx.tokenizer) {}

 private:
  void on_output(size_t stream, const RequestOutput& out) override {
    if (!streaming()) {
      builder_.add(stream, out);
      return;
    }
    for (const openai::Json& chunk : builder_.stream_chunks(stream, out)) {
      responder().write(openai::sse_event(chunk));
    }
  }
  void on_finished() override { finish(builder_, include_usage_); }

  bool include_usage_;
  openai::CompletionResponseBuilder builder_;
};

/// POST /v1/chat/completions: one engine request (n completions).
class ChatCall final : public EngineCall {
 public:
  ChatCall(std::shared_ptr<Server::Impl> server, std::shared_ptr<http::Responder> r,
           Clock::time_point arrival, const openai::ChatRequest& request)
      : EngineCall(server, std::move(r), arrival, request.stream),
        include_usage_(request.include_usage),
        builder_(request, server->ctx.tokenizer) {}

 private:
  void on_started() override {
    for (const openai::Json& chunk : builder_.start_chunks()) {
      responder().write(openai::sse_event(chunk));
    }
  }
  void on_output(size_t, const RequestOutput& out) override {
    if (!streaming()) {
      builder_.add(out);
      return;
    }
    for (const openai::Json& chunk : builder_.stream_chunks(out)) {
      responder().write(openai::sse_event(chunk));
    }
  }
  void on_finished() override { finish(builder_, include_usage_); }

  bool include_usage_;
  openai::ChatResponseBuilder builder_;
};

/// The routes open without the API key: probes and monitoring, which reveal nothing a client
/// could abuse and must answer load balancers and Prometheus that hold no key.
bool open_without_key(std::string_view path) {
  return path == "/health" || path == "/ping" || path == "/version" || path == "/metrics";
}

/// The transport's options with OpenAI error bodies, and the API key checked before routing on
/// every path but the open ones: without the key, a path without a route answers 401 too, not
/// 404. CORS preflights (OPTIONS) carry no credentials and pass.
http::HttpServerOptions with_openai_errors(http::HttpServerOptions options,
                                           const Server::Impl* server) {
  options.error_body = [](int status, std::string_view message) {
    return api_error_response({status, "", std::string(message), ""});
  };
  // A stream the transport ends itself ends as vLLM ends a failed stream: an error event, then
  // [DONE].
  options.stream_error_tail = [](int status, std::string_view message) {
    return openai::sse_event(openai::error_json({status, "", std::string(message), ""})) +
           std::string(openai::kSseDone);
  };
  options.guard = [server](const http::HttpRequest& request) -> std::optional<http::HttpResponse> {
    if (request.method == "OPTIONS" || open_without_key(request.path) ||
        server->authorized(request)) {
      return std::nullopt;
    }
    return api_error_response(openai::unauthorized().error());
  };
  return options;
}

}  // namespace

Server::Impl::Impl(EngineCore& engine_ref, ServerOptions opts)
    : engine(engine_ref),
      options(std::move(opts)),
      metrics(MetricsOptions{
          options.served_model_names.empty() ? std::string("model")
                                             : options.served_model_names.front(),
          options.metrics_prefix, engine_ref.max_model_len(), engine_ref.cache_info()}),
      http(with_openai_errors(options.http, this)),
      workers(std::max(1, options.num_request_threads), options.max_queued_requests) {
  PAGODA_CHECK(!options.served_model_names.empty(), "the server needs a served model name");
  const Tokenizer* tokenizer = engine.tokenizer() ? &*engine.tokenizer() : nullptr;
  // The template: --chat-template, else the tokenizer's, else the plain default (models that
  // ship none still chat, as with transformers' old default).
  const std::string source = options.chat_template.value_or(
      tokenizer != nullptr ? tokenizer->chat_template() : std::string());
  try {
    chat_template.emplace(source);
  } catch (const std::exception& e) {
    throw InvalidArgument(fmt::format("the chat template does not parse: {}", e.what()));
  }
  ctx.served_model_names = options.served_model_names;
  ctx.max_model_len = engine.max_model_len();
  ctx.vocab_size = options.vocab_size;
  ctx.tokenizer = tokenizer;
  ctx.chat_template = &*chat_template;
  ctx.defaults = options.generation_defaults;
  ctx.model_created = openai::unix_time_now();
  ctx.max_prompts_per_request = options.max_prompts_per_request;
  ctx.max_sequences_per_request = options.max_sequences_per_request;
  ctx.priority_scheduling = engine.priority_scheduling();
  ctx.allow_request_chat_template = options.trust_request_chat_template;
  ctx.return_tokens_as_token_ids = options.return_tokens_as_token_ids;
  ctx.render_limits = options.render_limits;
  // vLLM's rules: auto tool choice needs a parser; a parser alone parses nothing.
  if (!options.tool_call_parser.empty()) {
    tool_parser = openai::make_tool_parser(options.tool_call_parser);
  }
  if (options.enable_auto_tool_choice) {
    if (!tool_parser)
      throw InvalidArgument("--enable-auto-tool-choice requires --tool-call-parser");
    ctx.tool_parser = tool_parser.get();
  }
  if (!options.reasoning_parser.empty()) {
    reasoning = openai::reasoning_format(options.reasoning_parser);
    ctx.reasoning = &*reasoning;
  }
}

bool Server::Impl::authorized(const http::HttpRequest& request) const {
  if (options.api_key.empty()) return true;
  auto header = request.header("authorization");
  if (!header) return false;
  constexpr std::string_view kBearer = "Bearer ";
  if (header->size() < kBearer.size() || header->substr(0, kBearer.size()) != kBearer) {
    return false;
  }
  return constant_time_equal(header->substr(kBearer.size()), options.api_key);
}

void Server::Impl::add_routes() {
  // Handlers hold the Impl by raw pointer (it owns them); calls in flight hold it by shared_ptr.
  // The API key of /v1/ paths is checked before routing (with_openai_errors). Every handler runs
  // inside this guard: any exception (the parsers' ApiException, submit's InvalidArgument, a bug)
  // is answered as an OpenAI error.
  auto guarded = [](const auto& fn, http::HttpRequest request,
                    const std::shared_ptr<http::Responder>& responder) {
    const std::string where = request.method + " " + request.path;
    try {
      fn(std::move(request), responder);
    } catch (const std::exception& e) {
      const openai::ApiError error = openai::api_error_from(e);
      if (error.status >= 500) spdlog::error("server: {}: {}", where, e.what());
      if (!responder->answered()) {
        responder->send(api_error_response(error));
      } else {
        responder->end();
      }
    }
  };
  auto route = [this, guarded](const char* method, const char* path, auto fn) {
    http.route(
        method, path,
        [fn, guarded](http::HttpRequest request, std::shared_ptr<http::Responder> responder) {
          guarded(fn, std::move(request), responder);
        });
  };
  // Routes whose work grows with the request (a chat template's render, tokenizing prompts) run
  // on the work queue: a costly request delays the others' parsing at most, never their I/O.
  // The queue's threads are joined before the Impl goes (Server::shutdown), so `this` is safe.
  auto heavy_route = [this, guarded](const char* method, const char* path, auto fn) {
    http.route(
        method, path,
        [this, fn, guarded](http::HttpRequest request, std::shared_ptr<http::Responder> responder) {
          auto task = [this, fn, guarded, request = std::move(request), responder]() mutable {
            if (stopping.load()) {
              responder->send(api_error_response({503, "", "the server is shutting down", ""}));
              return;
            }
            guarded(fn, std::move(request), responder);
          };
          if (!workers.post(std::move(task))) {
            http::HttpResponse busy = api_error_response(
                {503, "",
                 stopping.load() ? "the server is shutting down"
                                 : "the server has too many requests waiting to be parsed",
                 ""});
            busy.headers.emplace_back("Retry-After", "1");
            responder->send(std::move(busy));
          }
        });
  };
  heavy_route("POST", "/v1/completions", [this](http::HttpRequest request, auto responder) {
    openai::CompletionRequest parsed = openai::parse_completion_request(
        request.body, ctx, request.header("x-request-id").value_or(""));
    spdlog::debug("server: {} with {} prompts, n={}, stream={}", parsed.id,
                  parsed.engine_requests.size(), parsed.n, parsed.stream);
    auto call =
        std::make_shared<CompletionCall>(shared_from_this(), responder, request.arrival, parsed);
    call->start(std::move(parsed.engine_requests));
  });
  heavy_route("POST", "/v1/chat/completions", [this](http::HttpRequest request, auto responder) {
    openai::ChatRequest parsed =
        openai::parse_chat_request(request.body, ctx, request.header("x-request-id").value_or(""));
    spdlog::debug("server: {} n={}, stream={}, prompt: {}", parsed.id, parsed.n, parsed.stream,
                  parsed.prompt_text);
    auto call = std::make_shared<ChatCall>(shared_from_this(), responder, request.arrival, parsed);
    std::vector<EngineRequest> requests;
    requests.push_back(std::move(parsed.engine_request));
    call->start(std::move(requests));
  });
  route("GET", "/v1/models", [this](http::HttpRequest, auto responder) {
    responder->send(json_response(openai::models_response(ctx)));
  });
  // The router matches exact paths: one route per served name, as sent raw and percent-encoded.
  for (const std::string& name : ctx.served_model_names) {
    for (const std::string& segment : {name, openai::encode_path_segment(name)}) {
      route("GET", ("/v1/models/" + segment).c_str(),
            [this, name](http::HttpRequest, auto responder) {
              responder->send(json_response(openai::model_response(ctx, name)));
            });
    }
  }
  heavy_route("POST", "/tokenize", [this](http::HttpRequest request, auto responder) {
    responder->send(json_response(openai::tokenize_response(request.body, ctx)));
  });
  heavy_route("POST", "/detokenize", [this](http::HttpRequest request, auto responder) {
    responder->send(json_response(openai::detokenize_response(request.body, ctx)));
  });
  // Bi-directional KV: pulls a finished turn's KV (another engine's return_kv hand-off) into this
  // engine's prefix cache; answers once the blocks are in (200) or the pull failed (502).
  route("POST", "/v1/kv_transfer/import", [this](http::HttpRequest request, auto responder) {
    openai::KVImportRequest parsed = openai::parse_kv_import_request(request.body);
    engine.import_kv(
        parsed.params, std::move(parsed.cache_salt), [responder](const KVImportResult& result) {
          if (!result.error.empty()) {
            responder->send(
                api_error_response({502, "", "importing the KV failed: " + result.error, ""}));
            return;
          }
          responder->send(json_response(openai::kv_import_response(result)));
        });
  });
  route("GET", "/version", [](http::HttpRequest, auto responder) {
    responder->send(json_response(openai::version_response()));
  });
  auto health = [this](http::HttpRequest, auto responder) {
    if (stopping.load()) throw Unavailable("the server is shutting down");
    if (std::string fatal = engine.fatal_error(); !fatal.empty()) throw Unavailable(fatal);
    (void)engine.stats();  // answers only while the engine's state is readable
    responder->send({200, "text/plain", "", {}});
  };
  route("GET", "/health", health);
  // vLLM's health route for SageMaker-style load balancers.
  route("GET", "/ping", health);
  route("POST", "/ping", health);
  route("GET", "/metrics", [this](http::HttpRequest, auto responder) {
    responder->send(
        {200, "text/plain; version=0.0.4; charset=utf-8", metrics.render(engine.stats()), {}});
  });
}

Server::Server(EngineCore& engine, ServerOptions options)
    : impl_(std::make_shared<Impl>(engine, std::move(options))) {
  impl_->add_routes();
}

Server::~Server() { shutdown(std::chrono::milliseconds(0)); }

uint16_t Server::start() { return impl_->http.start(); }

void Server::shutdown(std::chrono::milliseconds grace) {
  impl_->stopping = true;
  impl_->workers.stop();  // queued requests are answered 503; a render in progress ends
  impl_->http.shutdown(grace);
}

uint16_t Server::port() const { return impl_->http.port(); }

}  // namespace pagoda::server
