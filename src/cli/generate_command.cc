// `pagoda generate`: complete one or more prompts on the CPU and stream or print the result.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/parse_ids.h"
#include "core/status.h"
#include "engine/static_batch_generator.h"
#include "model/model.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string tokenizer;
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;
  int max_tokens = 16;
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  bool json = false;
  std::optional<int> logprobs;
  std::string load_format = "auto";
  std::string dtype = "auto";
  int threads = 0;
  int block_size = 16;
};

std::optional<Tokenizer> open_tokenizer(const GenerateOptions& o) {
  namespace fs = std::filesystem;
  if (!o.tokenizer.empty()) return Tokenizer::load(o.tokenizer);
  if (fs::exists(fs::path(o.model) / "tokenizer.json")) return Tokenizer::load(o.model);
  return std::nullopt;
}

SamplingParams sampling_params(const GenerateOptions& o, const ModelConfig& config) {
  SamplingParams p;
  p.max_tokens = o.max_tokens;
  // Flags win over the checkpoint's generation_config.json, which wins over vLLM's defaults.
  p.temperature = o.temperature.value_or(config.generation.temperature.value_or(1.0f));
  p.top_p = o.top_p.value_or(config.generation.top_p.value_or(1.0f));
  p.top_k = o.top_k.value_or(config.generation.top_k.value_or(0));
  p.min_p = o.min_p.value_or(0.0f);
  p.seed = o.seed;
  p.ignore_eos = o.ignore_eos;
  p.logprobs = o.logprobs;
  return p;
}

nlohmann::ordered_json logprobs_json(const SampledToken& t) {
  nlohmann::ordered_json entry = nlohmann::ordered_json::object();
  entry[std::to_string(t.token)] = t.logprob;
  for (const TokenLogprob& alt : t.top_logprobs) entry[std::to_string(alt.token)] = alt.logprob;
  return entry;
}

int run_generate(const GenerateOptions& o) {
  if (o.prompts.empty() == o.prompt_ids.empty()) {
    throw InvalidArgument(
        "give either --prompt or --prompt-ids (each may repeat), not both and not neither");
  }
  ThreadPool pool(o.threads);
  LoadOptions load;
  if (o.load_format == "dummy") load.format = LoadFormat::kDummy;
  if (o.dtype != "auto") {
    load.dtype = dtype_from_torch_name(o.dtype);
    if (!load.dtype)
      throw InvalidArgument(
          fmt::format("--dtype '{}' must be auto, float32, bfloat16 or float16", o.dtype));
  }
  const std::unique_ptr<Model> model = load_model(o.model, load, pool);
  const std::optional<Tokenizer> tokenizer = open_tokenizer(o);

  std::vector<GenerationRequest> requests;
  const SamplingParams params = sampling_params(o, model->config());
  for (const std::string& text : o.prompts) {
    if (!tokenizer)
      throw InvalidArgument(
          fmt::format("{}: no tokenizer.json; give --tokenizer or --prompt-ids", o.model));
    requests.push_back({tokenizer->encode(text, /*add_special_tokens=*/true), params});
  }
  for (const std::string& ids : o.prompt_ids)
    requests.push_back({parse_ids(ids, "--prompt-ids"), params});

  StaticBatchGenerator generator(*model, o.block_size);
  const bool stream = !o.json && requests.size() == 1 && tokenizer.has_value();
  std::optional<StreamingDetokenizer> detok;
  if (stream) {
    std::cout << tokenizer->decode(requests[0].prompt_ids, /*skip_special_tokens=*/true)
              << std::flush;
    detok.emplace(*tokenizer, /*skip_special_tokens=*/true);
  }
  const auto results = generator.generate(requests, [&](size_t, const SampledToken& t) {
    if (stream) std::cout << detok->add(t.token) << std::flush;
  });
  if (stream) {
    std::cout << detok->flush() << std::endl;
    return 0;
  }
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (o.json) {
      nlohmann::ordered_json j;
      j["prompt_token_ids"] = requests[i].prompt_ids;
      j["token_ids"] = r.token_ids;
      j["text"] = tokenizer ? nlohmann::json(tokenizer->decode(r.token_ids, true))
                            : nlohmann::json(nullptr);
      j["finish_reason"] = r.finish_reason;
      if (o.logprobs) {
        j["logprobs"] = nlohmann::ordered_json::array();
        for (const SampledToken& t : r.sampled) j["logprobs"].push_back(logprobs_json(t));
      } else {
        j["logprobs"] = nullptr;
      }
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      if (tokenizer) {
        std::cout << tokenizer->decode(requests[i].prompt_ids, true)
                  << tokenizer->decode(r.token_ids, true) << "\n";
      } else {
        std::cout << nlohmann::json(r.token_ids).dump() << "\n";
      }
    }
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace

void register_generate_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Complete prompts with a model on the CPU");
  cmd->add_option("--model", opts->model, "Hugging Face model directory")->required();
  cmd->add_option("--tokenizer", opts->tokenizer,
                  "tokenizer.json or directory (default: the model's)");
  cmd->add_option("--prompt", opts->prompts, "prompt text (repeatable)");
  cmd->add_option("--prompt-ids", opts->prompt_ids, "prompt as token ids, e.g. 1,2,3 (repeatable)");
  cmd->add_option("--max-tokens", opts->max_tokens, "tokens to generate at most")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", opts->temperature,
                  "0 = greedy (default: generation_config or 1.0)");
  cmd->add_option("--top-p", opts->top_p, "nucleus sampling mass in (0, 1]");
  cmd->add_option("--top-k", opts->top_k, "sample among the k most likely tokens (0: all)");
  cmd->add_option("--min-p", opts->min_p, "drop tokens below min_p times the top probability");
  cmd->add_option("--seed", opts->seed, "random seed (default: random)");
  cmd->add_flag("--ignore-eos", opts->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_flag("--json", opts->json, "print one JSON object per prompt instead of streaming text");
  cmd->add_option("--logprobs", opts->logprobs,
                  "with --json: top-K log-probabilities per token (<= 20)");
  cmd->add_option("--load-format", opts->load_format,
                  "auto (safetensors) or dummy (random weights)")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}));
  cmd->add_option("--dtype", opts->dtype, "dummy weights' dtype: auto, float32, bfloat16, float16");
  cmd->add_option("--threads", opts->threads, "CPU threads (default: all cores)");
  cmd->add_option("--block-size", opts->block_size, "KV cache block size in tokens")
      ->check(CLI::PositiveNumber);
  cmd->callback([opts, &exit_code] { exit_code = run_generate(*opts); });
}

}  // namespace pagoda::cli
