#pragma once
// Server: the OpenAI-compatible API over the engine. Routes HTTP requests through the protocol
// layer (server/openai) to EngineCore, streams results back and records the serving metrics.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "server/http/http_server.h"
#include "server/openai/server_context.h"

namespace pagoda::server {

/// How `pagoda serve` configures the API on top of the HTTP transport.
struct ServerOptions {
  http::HttpServerOptions http;
  /// Names the API accepts in "model"; the first is reported and labels the metrics.
  std::vector<std::string> served_model_names;
  /// Required as "Authorization: Bearer <key>" on every /v1 route; empty: no authentication.
  std::string api_key;
  /// A chat template's source; nullopt: the tokenizer's, or the plain default when it has none.
  std::optional<std::string> chat_template;
  std::string metrics_prefix = "pagoda";  // "pagoda" or "vllm"
  /// --tool-call-parser: how tool calls look in the model's output ("" = none); used only with
  /// --enable-auto-tool-choice, which makes tool_choice "auto" return parsed tool_calls.
  std::string tool_call_parser;
  bool enable_auto_tool_choice = false;
  /// --reasoning-parser: deepseek_r1 or qwen3 ("" = none): chat output is split into
  /// reasoning_content and content (server/openai/reasoning_parser.h).
  std::string reasoning_parser;
  /// From the model (the server layer does not read model files): the vocabulary size and the
  /// sampling defaults of generation_config.json.
  int64_t vocab_size = 0;
  openai::GenerationDefaults generation_defaults;
  /// --max-prompts-per-request, --max-sequences-per-request (openai::ServerContext).
  int64_t max_prompts_per_request = 1024;
  int64_t max_sequences_per_request = 1024;
};

/// The API server: /v1/completions, /v1/chat/completions, /v1/models, /tokenize, /detokenize,
/// /health, /version and /metrics on an HttpServer, answering from one EngineCore.
class Server {
 public:
  /// The engine must outlive the server.
  Server(EngineCore& engine, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Listens; returns the bound port. Throws Unavailable when the address is taken.
  uint16_t start();
  /// Stops accepting, lets requests finish for up to `grace`, then aborts what is left.
  void shutdown(std::chrono::milliseconds grace);
  [[nodiscard]] uint16_t port() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace pagoda::server
