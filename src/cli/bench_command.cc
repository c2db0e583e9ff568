// `pagoda bench throughput`: offline throughput with random prompts, as `vllm bench throughput`;
// registers `pagoda bench serve` (bench_serve_command.cc) beside it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/hub_env.h"
#include "core/status.h"
#include "engine/engine_core.h"
#include "model/config.h"
#include "pagoda/llm.h"

namespace pagoda::cli {
namespace {

struct ThroughputOptions {
  EngineFlags engine;
  int input_len = 128;
  int output_len = 128;
  int num_prompts = 64;
  uint64_t seed = 0;
};

int run_throughput(const ThroughputOptions& o) {
  EngineArgs args = o.engine.to_engine_args();
  resolve_model_sources(args, o.engine);
  args.seed = o.seed;
  EngineCore engine(args);
  const int64_t vocab = engine.model_config().vocab_size;
  std::mt19937_64 rng(o.seed);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < o.num_prompts; ++i) {
    EngineRequest r;
    for (int t = 0; t < o.input_len; ++t)
      r.prompt_token_ids.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
    // vLLM's benchmark settings: sample at temperature 1 and never stop early.
    r.params.temperature = 1.0f;
    r.params.max_tokens = o.output_len;
    r.params.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<OutputStream>> streams;
  for (EngineRequest& r : requests) streams.push_back(engine.submit(std::move(r)));
  int64_t output_tokens = 0;
  for (auto& s : streams) {
    for (const CompletionOutput& c : collect_result(*s).outputs)
      output_tokens += static_cast<int64_t>(c.token_ids.size());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t total_tokens = output_tokens + static_cast<int64_t>(o.num_prompts) * o.input_len;
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
              o.num_prompts / seconds, static_cast<double>(total_tokens) / seconds,
              static_cast<double>(output_tokens) / seconds);
  std::printf(
      "Total num prompt tokens:  %lld\nTotal num output tokens:  %lld\nElapsed: %.2f s, %lld "
      "steps, %lld preemptions\n",
      static_cast<long long>(static_cast<int64_t>(o.num_prompts) * o.input_len),
      static_cast<long long>(output_tokens), seconds,
      static_cast<long long>(engine.stats().num_steps),
      static_cast<long long>(engine.stats().num_preemptions));
  // Speculative decoding (vLLM's SpecDecoding figures): acceptance rate and tokens per
  // verification; with bench_acceptance_rate the rate comes out near the one asked for.
  const EngineStats stats = engine.stats();
  if (stats.spec_decode_num_drafts > 0) {
    std::printf(
        "Speculative decoding: %lld drafts verified, accepted %lld/%lld draft tokens (%.1f%%), "
        "mean "
        "acceptance length %.2f\n",
        static_cast<long long>(stats.spec_decode_num_drafts),
        static_cast<long long>(stats.spec_decode_num_accepted_tokens),
        static_cast<long long>(stats.spec_decode_num_draft_tokens),
        100.0 * static_cast<double>(stats.spec_decode_num_accepted_tokens) /
            static_cast<double>(std::max<int64_t>(1, stats.spec_decode_num_draft_tokens)),
        1.0 + static_cast<double>(stats.spec_decode_num_accepted_tokens) /
                  static_cast<double>(stats.spec_decode_num_drafts));
  }
  // Where the engine thread spent the run: the serial part idles the device, emitting overlaps it.
  const EngineStats::StepTimes st = engine.stats().step_times;
  const int64_t num_steps = engine.stats().num_steps;
  const double steps = std::max<double>(1.0, static_cast<double>(num_steps));
  std::printf(
      "Engine thread per step: device wait %.3f ms, serial host work %.3f ms (%.1f%%), emit "
      "(overlapped) %.3f ms\n",
      1e3 * st.device_wait_seconds / steps, 1e3 * st.host_serial_seconds / steps,
      100.0 * st.host_serial_seconds /
          std::max(1e-9, st.device_wait_seconds + st.host_serial_seconds + st.emit_seconds),
      1e3 * st.emit_seconds / steps);
  const double decodes = std::max<double>(1.0, static_cast<double>(st.num_decode_steps));
  std::printf(
      "  of which launch %.3f ms; decode-only steps: %lld, device wait %.3f ms, serial host work "
      "%.3f ms\n",
      1e3 * st.launch_seconds / steps, static_cast<long long>(st.num_decode_steps),
      1e3 * st.decode_device_wait_seconds / decodes, 1e3 * st.decode_host_serial_seconds / decodes);
  return 0;
}

}  // namespace

void register_bench_serve_command(CLI::App& bench, int& exit_code);  // bench_serve_command.cc

void register_bench_commands(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto opts = std::make_shared<ThroughputOptions>();
  CLI::App* cmd = bench->add_subcommand("throughput", "Offline throughput with random prompts");
  add_engine_flags(cmd, opts->engine);
  cmd->add_option("--input-len", opts->input_len, "prompt tokens per request")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", opts->output_len, "output tokens per request")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-prompts", opts->num_prompts, "requests")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", opts->seed, "seed of the prompts, the sampling and dummy weights");
  cmd->callback([opts, &exit_code] { exit_code = run_throughput(*opts); });
  register_bench_serve_command(*bench, exit_code);
}

}  // namespace pagoda::cli
