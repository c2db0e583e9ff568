// `pagoda serve MODEL_DIR`: the OpenAI-compatible HTTP server (vLLM's `vllm serve`), until SIGINT
// or SIGTERM, after which requests in flight get --shutdown-timeout seconds to finish.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/hub_env.h"
#include "cli/kv_transfer_config.h"
#include "cli/signals.h"
#include "cli/vllm_flags.h"
#include "core/logging.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "engine/engine_core.h"
#include "kv/memory_size.h"
#include "model/config.h"
#include "router/router_server.h"
#include "server/openai/reasoning_parser.h"
#include "server/openai/tool_parser.h"
#include "server/server.h"
#include "server/stats_log.h"

namespace pagoda::cli {
namespace {

struct ServeOptions {
  EngineFlags engine;
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<std::string> served_model_names;
  std::string api_key;
  std::string chat_template_file;
  std::string max_request_body = "1M";
  double shutdown_timeout = 30;
  double keep_alive_timeout = 5;
  int64_t max_connections = 0;  // 0: the open file limit less a reserve for the engine
  int64_t max_prompts_per_request = 1024;
  int64_t max_sequences_per_request = 1024;
  std::string metrics_prefix = "pagoda";
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
  std::string reasoning_parser;
  bool enable_reasoning = false;      // vLLM <= 0.8 needed it beside --reasoning-parser; accepted
  std::string model_flag;             // --model: vLLM's older spelling of the positional
  uint64_t seed = 0;                  // --seed: requests without their own seed
  bool disable_log_stats = false;     // no periodic stats line
  bool disable_log_requests = false;  // accepted: requests are logged at debug level only
  bool enable_log_requests = false;   // accepted: requests are logged at debug level only
  std::string generation_config = "auto";  // auto (the model's), vllm (none) or a directory
  bool trust_request_chat_template = false;
  bool return_tokens_as_token_ids = false;
  std::string kv_transfer_config;  // --kv-transfer-config JSON (cli/kv_transfer_config.h)
  int64_t chat_template_max_steps = 10'000'000;
  std::string chat_template_max_output = "64M";
  std::string max_stream_buffer = "8M";
  // CORS (vLLM's flags): each list as JSON ('["*"]', vLLM's form) or as plain values.
  std::vector<std::string> allowed_origins{"*"}, allowed_methods{"*"}, allowed_headers{"*"};
  bool allow_credentials = false;
};

/// A CORS list flag: vLLM takes one JSON list ('["https://a.example"]'); plain values, repeated
/// or comma-separated, work too.
std::vector<std::string> cors_list(const std::vector<std::string>& given, const char* flag) {
  std::vector<std::string> out;
  for (const std::string& v : given) {
    if (!v.empty() && v.front() == '[') {
      try {
        for (const auto& item : nlohmann::json::parse(v)) out.push_back(item.get<std::string>());
      } catch (const std::exception&) {
        throw InvalidArgument(fmt::format("{}: '{}' is not a JSON list of strings", flag, v));
      }
      continue;
    }
    // CLI11 splits a bracketed list itself and leaves each item's JSON quotes on it.
    for (size_t at = 0; at <= v.size();) {
      size_t end = v.find(',', at);
      if (end == std::string::npos) end = v.size();
      std::string item = v.substr(at, end - at);
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (item.size() >= 2 && item.front() == '"' && item.back() == '"') {
        item = item.substr(1, item.size() - 2);
      }
      if (!item.empty()) out.push_back(item);
      at = end + 1;
    }
  }
  return out;
}

/// The stats line's period: 10 s as vLLM's, or PAGODA_LOG_STATS_INTERVAL seconds (vLLM's
/// VLLM_LOG_STATS_INTERVAL).
std::chrono::milliseconds stats_log_interval() {
  const char* env = std::getenv("PAGODA_LOG_STATS_INTERVAL");
  const double seconds = env != nullptr ? std::atof(env) : 10.0;
  return std::chrono::milliseconds(static_cast<int64_t>(1000 * (seconds > 0 ? seconds : 10.0)));
}

/// The generation_config.json --generation-config names: "" for auto (the model's, already in
/// its config) and vllm (none), else the one in that directory.
std::string generation_config_path(const std::string& choice) {
  if (choice == "auto" || choice == "vllm") return "";
  return (std::filesystem::path(choice) / "generation_config.json").string();
}

/// The sampling defaults --generation-config names: the model's generation_config.json (auto),
/// none (vllm), or the generation_config.json of another directory.
openai::GenerationDefaults generation_defaults(const std::string& choice,
                                               const ModelConfig& model) {
  if (choice == "vllm") return {};
  ModelConfig config = model;
  if (const std::string path = generation_config_path(choice); !path.empty()) {
    config.generation = {};
    apply_generation_config(read_text_file(path), path, config);
  }
  openai::GenerationDefaults d;
  d.temperature = config.generation.temperature;
  d.top_p = config.generation.top_p;
  d.top_k = config.generation.top_k;
  d.repetition_penalty = config.generation.repetition_penalty;
  return d;
}

std::chrono::milliseconds to_ms(double seconds, const char* flag) {
  if (!(seconds >= 0)) throw InvalidArgument(fmt::format("{} must be >= 0", flag));
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

/// Loads the engine, with a progress line on a terminal: the percentage of the weights loaded
/// (GPU uploads, dummy fills), then how long it took.
std::unique_ptr<EngineCore> load_engine(EngineArgs args) {
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  const auto t0 = std::chrono::steady_clock::now();
  if (tty) {
    std::fprintf(stderr, "loading weights from %s ...", args.model.c_str());
    auto last = std::make_shared<int>(-1);
    args.load_progress = [model = args.model, last](double fraction) {
      const int percent = static_cast<int>(fraction * 100);
      if (percent == *last) return;
      *last = percent;
      std::fprintf(stderr, "\rloading weights from %s: %3d%%", model.c_str(), percent);
    };
  }
  std::unique_ptr<EngineCore> engine;
  try {
    engine = std::make_unique<EngineCore>(args);
  } catch (...) {
    if (tty) std::fprintf(stderr, " failed\n");
    throw;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty)
    std::fprintf(stderr, "\rloading weights from %s: done in %.1f s\n", args.model.c_str(),
                 seconds);
  spdlog::info("model {} loaded in {:.1f} s; KV cache {} tokens, max model length {}", args.model,
               seconds, engine->kv_capacity_tokens(), engine->max_model_len());
  return engine;
}

/// --data-parallel-size N: N engine replicas in this process, each with its own KV pool and its own
/// server on a loopback port the system picks, behind `pagoda router`'s balancer on --host:--port
/// (prefix-cache-aware, bounded by load; docs/engine.md). The replicas share the cores: each has
/// --threads / N of them (all cores / N by default).
int serve_replicas(const ServeOptions& o, EngineArgs args, const server::ServerOptions& so,
                   std::chrono::milliseconds grace, int replicas) {
  if (args.tensor_parallel_size > 1) {
    throw InvalidArgument(fmt::format(
        "--data-parallel-size {} with --tensor-parallel-size {}: not yet (one of them only)",
        replicas, args.tensor_parallel_size));
  }
  const int cores = args.num_threads > 0 ? args.num_threads
                                         : static_cast<int>(std::thread::hardware_concurrency());
  args.num_threads = std::max(1, cores / replicas);
  std::vector<std::unique_ptr<EngineCore>> engines;
  std::vector<std::unique_ptr<server::Server>> servers;
  router::RouterOptions ro;
  for (int i = 0; i < replicas; ++i) {
    engines.push_back(load_engine(args));
    server::ServerOptions replica = so;
    replica.http.host = "127.0.0.1";
    replica.http.port = 0;
    const ModelConfig& config = engines.back()->model_config();
    replica.vocab_size = config.vocab_size;
    replica.generation_defaults = generation_defaults(o.generation_config, config);
    servers.push_back(std::make_unique<server::Server>(*engines.back(), replica));
    ro.backends.push_back(fmt::format("http://127.0.0.1:{}", servers.back()->start()));
    spdlog::info("data-parallel replica {} of {}: {}", i, replicas, ro.backends.back());
  }
  ro.http.host = o.host;
  ro.http.port = static_cast<uint16_t>(o.port);
  ro.http.max_request_body = so.http.max_request_body;
  ro.http.max_connections = so.http.max_connections / 2;  // two descriptors per proxied request
  ro.http.cors = so.http.cors;
  ro.api_key = so.api_key;  // checked here, and forwarded to the replicas, which check it too
  install_signal_handlers();
  router::RouterServer balancer(ro);
  const uint16_t port = balancer.start();
  std::vector<std::unique_ptr<server::StatsLogger>> stats;
  if (!o.disable_log_stats) {
    for (auto& e : engines)
      stats.push_back(std::make_unique<server::StatsLogger>(*e, stats_log_interval()));
  }
  spdlog::info("serving {} as {} on http://{}:{} over {} replicas{}", args.model,
               fmt::join(so.served_model_names, ", "),
               o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host, port, replicas,
               so.api_key.empty() ? "" : " (API key required)");
  wait_for_signal();
  spdlog::info("shutting down: up to {:g} s for requests in flight", o.shutdown_timeout);
  balancer.shutdown(grace);
  for (auto& s : servers) s->shutdown(grace);
  stats.clear();
  for (auto& e : engines) e->shutdown();
  spdlog::info("stopped");
  return 0;
}

/// The tool-calling flags, before the (slow) model load, with vLLM's rules and messages.
void check_tool_flags(const ServeOptions& o) {
  if (o.enable_auto_tool_choice && o.tool_call_parser.empty()) {
    throw InvalidArgument(
        fmt::format("--enable-auto-tool-choice requires --tool-call-parser (one of: {})",
                    fmt::join(openai::tool_parser_names(), ", ")));
  }
  if (o.tool_call_parser.empty()) return;
  try {
    (void)openai::make_tool_parser(o.tool_call_parser);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("--tool-call-parser: {}", e.what()));
  }
  if (!o.enable_auto_tool_choice) {
    spdlog::warn(
        "--tool-call-parser {} without --enable-auto-tool-choice: tool calls are not "
        "parsed from the output",
        o.tool_call_parser);
  }
}

int run_serve(const ServeOptions& o) {
  const size_t fd_limit = http::raise_open_file_limit();
  if (fd_limit < 4096) {
    spdlog::warn("open file limit is {}: fewer concurrent connections fit", fd_limit);
  }
  if (o.metrics_prefix != "pagoda" && o.metrics_prefix != "vllm") {
    throw InvalidArgument("--metrics-prefix must be pagoda or vllm");
  }
  check_tool_flags(o);
  if (!o.reasoning_parser.empty()) {
    try {
      (void)openai::reasoning_format(o.reasoning_parser);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("--reasoning-parser: {}", e.what()));
    }
  }
  if (o.model_dir.empty() == o.model_flag.empty()) {
    throw InvalidArgument("give the model directory once: as `serve MODEL_DIR` or `--model DIR`");
  }
  const std::string model_dir = o.model_dir.empty() ? o.model_flag : o.model_dir;
  if (const std::string path = generation_config_path(o.generation_config);
      !path.empty() && !std::filesystem::exists(path)) {  // before the (slow) model load
    throw NotFound(fmt::format("--generation-config: {}: no such file", path));
  }
  if (o.engine.data_parallel_size < 1) {
    throw InvalidArgument(
        fmt::format("--data-parallel-size {}: must be at least 1", o.engine.data_parallel_size));
  }
  if (o.engine.data_parallel_size > 1 && !o.kv_transfer_config.empty()) {
    throw InvalidArgument(
        "--kv-transfer-config with --data-parallel-size > 1: one engine per P/D role "
        "(run several and list them to `pagoda router --prefill/--decode`)");
  }
  EngineFlags engine_flags = o.engine;
  engine_flags.data_parallel_size = 1;  // the replicas are made here, each of one engine
  EngineArgs args = engine_flags.to_engine_args();
  if (!o.kv_transfer_config.empty()) {
    try {
      args.kv_transfer_config = parse_kv_transfer_config(o.kv_transfer_config);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("--kv-transfer-config: {}", e.what()));
    }
  }
  args.model = model_dir;  // served as given (e.g. org/name), loaded from what it resolves to
  resolve_model_sources(args, o.engine);
  args.seed = o.seed;

  server::ServerOptions so;
  so.http.host = o.host;
  so.http.port = static_cast<uint16_t>(o.port);
  so.http.num_io_threads =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 2, 4);
  so.num_request_threads = so.http.num_io_threads;
  try {
    so.http.max_request_body = static_cast<size_t>(kv::parse_memory_size(o.max_request_body));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("--max-request-body: {}", e.what()));
  }
  so.http.keep_alive_timeout = to_ms(o.keep_alive_timeout, "--keep-alive-timeout");
  so.http.cors.origins = cors_list(o.allowed_origins, "--allowed-origins");
  so.http.cors.methods = cors_list(o.allowed_methods, "--allowed-methods");
  so.http.cors.headers = cors_list(o.allowed_headers, "--allowed-headers");
  so.http.cors.credentials = o.allow_credentials;
  try {
    so.http.max_stream_buffer = static_cast<size_t>(kv::parse_memory_size(o.max_stream_buffer));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("--max-stream-buffer: {}", e.what()));
  }
  if (o.max_connections < 0) throw InvalidArgument("--max-connections must be >= 0");
  // The engine, the model files and the logs keep some descriptors for themselves.
  constexpr size_t kReservedDescriptors = 128;
  so.http.max_connections =
      o.max_connections > 0
          ? static_cast<size_t>(o.max_connections)
          : (fd_limit > 2 * kReservedDescriptors ? fd_limit - kReservedDescriptors : fd_limit / 2);
  if (o.max_prompts_per_request < 1 || o.max_sequences_per_request < 1) {
    throw InvalidArgument("--max-prompts-per-request and --max-sequences-per-request must be >= 1");
  }
  so.max_prompts_per_request = o.max_prompts_per_request;
  so.max_sequences_per_request = o.max_sequences_per_request;
  const auto grace = to_ms(o.shutdown_timeout, "--shutdown-timeout");
  so.served_model_names =
      o.served_model_names.empty() ? std::vector<std::string>{model_dir} : o.served_model_names;
  so.api_key = o.api_key;
  for (const char* name : {"PAGODA_API_KEY", "VLLM_API_KEY"}) {
    const char* env = std::getenv(name);
    if (so.api_key.empty() && env != nullptr) so.api_key = env;
  }
  if (!o.chat_template_file.empty()) {
    const std::string& t = o.chat_template_file;
    // vLLM takes a file or the template itself ("in single-line form").
    const bool inline_template =
        !std::filesystem::exists(t) &&
        (t.find("{{") != std::string::npos || t.find("{%") != std::string::npos);
    try {
      so.chat_template = inline_template ? t : read_text_file(t);
    } catch (const NotFound& e) {
      throw NotFound(fmt::format("--chat-template: {}", e.what()));
    }
  }
  so.metrics_prefix = o.metrics_prefix;
  so.tool_call_parser = o.tool_call_parser;
  so.enable_auto_tool_choice = o.enable_auto_tool_choice;
  so.reasoning_parser = o.reasoning_parser;
  so.trust_request_chat_template = o.trust_request_chat_template;
  so.return_tokens_as_token_ids = o.return_tokens_as_token_ids;
  if (o.chat_template_max_steps < 1)
    throw InvalidArgument("--chat-template-max-steps must be >= 1");
  so.render_limits.max_steps = o.chat_template_max_steps;
  try {
    so.render_limits.max_output_bytes =
        static_cast<size_t>(kv::parse_memory_size(o.chat_template_max_output));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("--chat-template-max-output: {}", e.what()));
  }

  if (o.engine.data_parallel_size > 1) {
    return serve_replicas(o, args, so, grace, o.engine.data_parallel_size);
  }
  std::unique_ptr<EngineCore> engine = load_engine(args);
  const ModelConfig& config = engine->model_config();
  so.vocab_size = config.vocab_size;
  so.generation_defaults = generation_defaults(o.generation_config, config);

  install_signal_handlers();
  server::Server server(*engine, so);
  const uint16_t port = server.start();
  std::optional<server::StatsLogger> stats_logger;
  if (!o.disable_log_stats) stats_logger.emplace(*engine, stats_log_interval());
  spdlog::info("serving {} as {} on http://{}:{}{}", model_dir,
               fmt::join(so.served_model_names, ", "),
               o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host, port,
               so.api_key.empty() ? "" : " (API key required)");

  // A fatal engine error (a tensor-parallel rank that exited) ends the server like a signal,
  // with status 1 and the error named.
  std::string fatal;
  wait_for_signal_or(
      [&] {
        fatal = engine->fatal_error();
        return !fatal.empty();
      },
      std::chrono::milliseconds(200));
  if (!fatal.empty()) spdlog::error("{}", fatal);
  spdlog::info("shutting down: up to {:g} s for requests in flight", o.shutdown_timeout);
  server.shutdown(grace);
  stats_logger.reset();
  engine->shutdown();
  spdlog::info("stopped");
  return fatal.empty() ? 0 : 1;
}

}  // namespace

void register_serve_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model with an OpenAI-compatible HTTP API");
  // Not "model": newer CLI11 refuses a positional named like the --model option.
  cmd->add_option("model_dir", opts->model_dir,
                  "Hugging Face model directory, or a Hub repo id (org/name)");
  cmd->add_option("--model", opts->model_flag,
                  "the model directory or repo id, in place of MODEL_DIR");
  cmd->add_option("--seed", opts->seed, "seed of requests that set none (default 0)");
  cmd->add_flag("--disable-log-stats", opts->disable_log_stats, "no engine stats line every 10 s");
  cmd->add_flag("--disable-log-requests", opts->disable_log_requests,
                "accepted (requests are logged at debug level only)");
  cmd->add_flag("--enable-log-requests", opts->enable_log_requests,
                "accepted (requests are logged at debug level only)");
  cmd->add_option("--generation-config", opts->generation_config,
                  "sampling defaults: auto (the model's generation_config.json), vllm (none) or "
                  "a directory holding one");
  cmd->add_option("--host", opts->host, "address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", opts->port, "port to listen on (default 8000)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--served-model-name", opts->served_model_names,
                  "names the API answers to (repeatable; default: the model directory)");
  cmd->add_option("--api-key", opts->api_key,
                  "require 'Authorization: Bearer KEY' on every route but /health, /ping, /version "
                  "and /metrics (or env PAGODA_API_KEY, VLLM_API_KEY)");
  cmd->add_option("--chat-template", opts->chat_template_file,
                  "a Jinja chat template file, or the template itself (default: the tokenizer's)");
  cmd->add_option("--max-request-body", opts->max_request_body,
                  "largest request body, e.g. 1M (default), 512K; larger gets 413");
  cmd->add_option("--shutdown-timeout", opts->shutdown_timeout,
                  "seconds requests in flight may take after SIGINT/SIGTERM (default 30); then "
                  "streams end with an error event and [DONE], other requests with a 503");
  cmd->add_option("--max-stream-buffer", opts->max_stream_buffer,
                  "output a stream may hold for a client that reads slower than it is produced, "
                  "e.g. 8M (default); past it the stream ends with an error and the request is "
                  "aborted");
  cmd->add_option("--keep-alive-timeout", opts->keep_alive_timeout,
                  "seconds clients may keep an idle connection (default 5), advertised as "
                  "Keep-Alive: timeout=N; the server closes it a minute later");
  cmd->add_option("--max-connections", opts->max_connections,
                  "open connections served at once; past it new ones get 503 (default: the open "
                  "file limit less 128)");
  cmd->add_option("--max-prompts-per-request", opts->max_prompts_per_request,
                  "prompts one /v1/completions request may hold (default 1024)");
  cmd->add_option("--max-sequences-per-request", opts->max_sequences_per_request,
                  "sequences (n x prompts) one request may ask for (default 1024)");
  cmd->add_option("--metrics-prefix", opts->metrics_prefix,
                  "metric name prefix on /metrics: pagoda (default) or vllm")
      ->check(CLI::IsMember({"pagoda", "vllm", "pagoda:", "vllm:"}));
  cmd->add_flag("--enable-auto-tool-choice", opts->enable_auto_tool_choice,
                "parse tool calls from the output of chat requests with tools and tool_choice "
                "auto (needs --tool-call-parser)");
  cmd->add_option("--tool-call-parser", opts->tool_call_parser,
                  "the model's tool call format: hermes, llama3_json or mistral");
  cmd->add_option("--reasoning-parser", opts->reasoning_parser,
                  "split <think> reasoning into reasoning_content: deepseek_r1 or qwen3");
  cmd->add_flag("--trust-request-chat-template", opts->trust_request_chat_template,
                "let requests bring their own chat_template (a template is code; default: 400)");
  cmd->add_option("--chat-template-max-steps", opts->chat_template_max_steps,
                  "statements and expressions one chat template render may evaluate; past it "
                  "the request is a 400 (default 10000000)");
  cmd->add_option("--chat-template-max-output", opts->chat_template_max_output,
                  "largest rendered chat (and any string a template builds), e.g. 64M (default)");
  cmd->add_flag("--return-tokens-as-token-ids", opts->return_tokens_as_token_ids,
                "spell logprob tokens as token_id:<id> unless a request says otherwise");
  cmd->add_flag("--enable-reasoning", opts->enable_reasoning,
                "accepted (older vLLM needed it with --reasoning-parser)");
  cmd->add_option("--allowed-origins", opts->allowed_origins,
                  "CORS: origins a browser page may call the API from, as a JSON list (default "
                  "[\"*\"])");
  cmd->add_option("--allowed-methods", opts->allowed_methods,
                  "CORS: methods allowed to other origins, as a JSON list (default [\"*\"])");
  cmd->add_option("--allowed-headers", opts->allowed_headers,
                  "CORS: request headers allowed to other origins, as a JSON list (default "
                  "[\"*\"])");
  cmd->add_flag("--allow-credentials", opts->allow_credentials,
                "CORS: let other origins send credentials (cookies, Authorization)");
  cmd->add_option("--kv-transfer-config", opts->kv_transfer_config,
                  "prefill/decode disaggregation, vLLM's JSON: {\"kv_connector\": "
                  "\"PagodaConnector\", \"kv_role\": \"kv_producer\"|\"kv_consumer\"|"
                  "\"kv_both\", \"kv_connector_extra_config\": {\"transport\": \"tcp\"|\"ucx\", "
                  "\"host\", \"port\", \"pull_timeout\", \"keep_timeout\", \"ucx_tls\"}}");
  add_engine_flags(cmd, opts->engine, /*model_flag=*/false);
  auto vllm = std::make_shared<VllmCompatFlags>();
  add_vllm_compat_flags(cmd, vllm, /*server=*/true);
  cmd->callback([opts, vllm, &exit_code] {
    vllm->check();
    exit_code = run_serve(*opts);
  });
}

}  // namespace pagoda::cli
