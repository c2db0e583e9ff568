#include "cli/vllm_flags.h"

#include <spdlog/spdlog.h>

#include "core/status.h"

namespace pagoda::cli {
namespace {

/// One of vLLM's flags: whether it takes a value, and why pagoda ignores or refuses it.
struct KnownFlag {
  const char* name;
  bool takes_value;
  const char* why;
};

// Accepted: they change vLLM's logging, its Python web stack or its scheduling internals, never
// what a request returns.
constexpr KnownFlag kHarmless[] = {
    {"--uvicorn-log-level", true, "pagoda's HTTP server logs at --log-level"},
    {"--disable-uvicorn-access-log", false, "requests are logged at debug level only"},
    {"--async-scheduling", false, "pagoda always overlaps the host work with the device step"},
    {"--no-async-scheduling", false, "pagoda always overlaps the host work with the device step"},
    {"--max-log-len", true, "prompts are logged at debug level only"},
    {"--disable-fastapi-docs", false, "pagoda serves no /docs pages"},
    {"--enable-prompt-tokens-details", false,
     "usage.prompt_tokens_details.cached_tokens is always reported when the prefix cache served "
     "tokens"},
    {"--enable-server-load-tracking", false, "the load is on /metrics"},
    {"--enable-log-outputs", false, "outputs are logged at debug level only"},
    {"--disable-frontend-multiprocessing", false, "the API server runs in the engine's process"},
    {"--enable-request-id-headers", false, "X-Request-Id names a request (request_id)"},
    {"--h11-max-incomplete-event-size", true, "pagoda bounds requests with --max-request-body"},
    {"--h11-max-header-count", true, "pagoda bounds headers to 64 KiB"},
    {"--log-error-stack", false, "errors are logged with their message"},
    {"--max-parallel-loading-workers", true, "weights load with --threads"},
    {"--disable-custom-all-reduce", false, "one device: no all-reduce"},
    {"--max-seq-len-to-capture", true, "decode graphs cover every length"},
    {"--cuda-graph-sizes", true, "decode graphs are captured for vLLM's default sizes"},
    {"--compilation-config", true, "pagoda compiles no graphs with torch.compile"},
    {"-O", true, "pagoda compiles no graphs with torch.compile"},
    {"--num-scheduler-steps", true, "one scheduler step per model step"},
    {"--multi-step-stream-outputs", true, "outputs stream every step"},
    {"--scheduler-delay-factor", true, "requests are scheduled as soon as they arrive"},
    {"--max-num-partial-prefills", true, "prompts are prefilled in chunks of the token budget"},
    {"--max-long-partial-prefills", true, "prompts are prefilled in chunks of the token budget"},
    {"--long-prefill-token-threshold", true, "prompts are prefilled in chunks of the token budget"},
    {"--disable-cascade-attn", false, "pagoda has no cascade attention"},
    {"--model-impl", true, "pagoda runs its own implementation of each architecture"},
    {"--config-format", true, "config.json is read in either transformers dialect"},
    {"--guided-decoding-backend", true, "structured outputs have one backend"},
    {"--structured-outputs-config", true, "structured outputs have one backend"},
    {"--preemption-mode", true, "preempted requests are recomputed"},
    {"--disable-async-output-proc", false, "outputs are emitted while the device computes"},
    {"--enable-expert-parallel", false, "no mixture-of-experts model runs here"},
    {"--allowed-local-media-path", true, "pagoda takes no media inputs"},
    {"--code-revision", true, "pagoda never runs code from a model directory"},
};

// Refused: each asks for something pagoda does not do, and running without it would silently
// serve something else.
constexpr KnownFlag kRefused[] = {
    {"--enable-lora", false, "LoRA adapters are not supported"},
    {"--lora-modules", true, "LoRA adapters are not supported"},
    {"--max-loras", true, "LoRA adapters are not supported"},
    {"--max-lora-rank", true, "LoRA adapters are not supported"},
    {"--max-cpu-loras", true, "LoRA adapters are not supported"},
    {"--fully-sharded-loras", false, "LoRA adapters are not supported"},
    {"--prompt-adapters", true, "prompt adapters are not supported"},
    {"--ssl-keyfile", true, "pagoda serves plain HTTP; put a TLS proxy in front"},
    {"--ssl-certfile", true, "pagoda serves plain HTTP; put a TLS proxy in front"},
    {"--ssl-ca-certs", true, "pagoda serves plain HTTP; put a TLS proxy in front"},
    {"--ssl-cert-reqs", true, "pagoda serves plain HTTP; put a TLS proxy in front"},
    {"--root-path", true, "routes are served at the root only"},
    {"--middleware", true, "pagoda runs no Python middleware"},
    {"--response-role", true, "the answer's role is always assistant"},
    {"--tool-parser-plugin", true, "pagoda loads no Python plugins"},
    {"--tool-server", true, "built-in tool servers are not supported"},
    {"--enable-prompt-embeds", false, "prompts are text or token ids only"},
    {"--limit-mm-per-prompt", true, "multimodal inputs are not supported"},
    {"--mm-processor-kwargs", true, "multimodal inputs are not supported"},
    {"--enable-sleep-mode", false, "sleep mode is not supported"},
    {"--cpu-offload-gb", true, "weights are not offloaded to the CPU"},
    {"--kv-events-config", true, "KV cache events are not published"},
    {"--otlp-traces-endpoint", true, "OpenTelemetry tracing is not supported"},
    {"--collect-detailed-traces", true, "OpenTelemetry tracing is not supported"},
    {"--hf-overrides", true, "config.json is used as it is"},
    {"--override-generation-config", true,
     "use --generation-config DIR with a generation_config.json"},
    {"--rope-scaling", true, "RoPE scaling comes from config.json"},
    {"--rope-theta", true, "RoPE comes from config.json"},
    {"--disable-sliding-window", false, "sliding windows follow config.json"},
    {"--num-gpu-blocks-override", true, "size the KV cache with --kv-cache-memory"},
    {"--worker-cls", true, "pagoda loads no Python workers"},
    {"--worker-extension-cls", true, "pagoda loads no Python workers"},
    {"--config", true, "flags are read from the command line only"},
    {"--headless", false, "the API server always runs"},
    {"--api-server-count", true, "one API server per process"},
    {"--enable-force-include-usage", false, "usage is sent when stream_options asks for it"},
    {"--max-logprobs", true, "requests may ask for up to 20 log-probabilities"},
    {"--chat-template-content-format", true, "message content is passed as the template expects"},
    {"--logits-processors", true, "pagoda loads no Python logits processors"},
    {"--logits-processor-pattern", true, "pagoda loads no Python logits processors"},
    {"--enable-return-routed-experts", false, "no mixture-of-experts model runs here"},
    {"--served-model-revision", true, "the model is a local directory"},
};

const KnownFlag* find(std::string_view name) {
  for (const auto& f : kHarmless) {
    if (name == f.name) return &f;
  }
  for (const auto& f : kRefused) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// Flags that only the API server has (serve): the rest apply to generate and bench too.
bool server_only(std::string_view name) {
  return name.starts_with("--uvicorn") || name.starts_with("--disable-fastapi") ||
         name.starts_with("--enable-prompt-tokens") || name.starts_with("--ssl-") ||
         name.starts_with("--h11-") || name == "--root-path" || name == "--middleware" ||
         name == "--response-role" || name == "--tool-parser-plugin" || name == "--tool-server" ||
         name == "--enable-server-load-tracking" || name == "--disable-uvicorn-access-log" ||
         name == "--enable-request-id-headers" || name == "--max-log-len" ||
         name == "--enable-log-outputs" || name == "--disable-frontend-multiprocessing" ||
         name == "--log-error-stack" || name == "--headless" || name == "--api-server-count" ||
         name == "--enable-force-include-usage" || name == "--chat-template-content-format";
}

void add(CLI::App* cmd, const KnownFlag& f, const std::shared_ptr<VllmCompatFlags>& seen,
         bool refused) {
  const std::string name = f.name;
  auto record = [seen, name, refused](const auto&) {
    (refused ? seen->refused : seen->accepted).push_back(name);
  };
  const std::string help = std::string(refused ? "refused: " : "no effect: ") + f.why;
  CLI::Option* option = f.takes_value
                            ? cmd->add_option_function<std::vector<std::string>>(name, record, help)
                                  ->expected(0, 1)
                                  ->allow_extra_args(false)
                            : cmd->add_flag_function(name, record, help);
  option->group("vLLM compatibility");
}

}  // namespace

void VllmCompatFlags::check() const {
  for (const std::string& name : accepted) {
    spdlog::info("{} is accepted and has no effect here: {}", name, find(name)->why);
  }
  if (!refused.empty()) {
    const std::string& name = refused.front();
    throw InvalidArgument(fmt::format("{} is not supported by pagoda: {}", name, find(name)->why));
  }
}

void add_vllm_compat_flags(CLI::App* cmd, const std::shared_ptr<VllmCompatFlags>& seen,
                           bool server) {
  for (const auto& f : kHarmless) {
    if (server || !server_only(f.name)) add(cmd, f, seen, false);
  }
  for (const auto& f : kRefused) {
    if (server || !server_only(f.name)) add(cmd, f, seen, true);
  }
}

}  // namespace pagoda::cli
