// `pagoda generate`: complete prompts offline with the engine, streaming one prompt's text, or
// printing JSON per prompt, or turning a JSONL file of requests into a JSONL file of results.
#include <fstream>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/hub_env.h"
#include "cli/parse_ids.h"
#include "core/status.h"
#include "engine/engine_core.h"
#include "model/config.h"
#include "pagoda/llm.h"
#include "sampling/params_json.h"
#include "server/openai/api_error.h"
#include "server/openai/structured_request.h"

namespace pagoda::cli {
namespace {

using ordered_json = nlohmann::ordered_json;

struct GenerateOptions {
  EngineFlags engine;
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;
  std::string input, output;
  int max_tokens = 16;
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  bool json = false;
  std::optional<int> logprobs;
  bool use_beam_search = false;
  int beam_width = 1;
  float length_penalty = 1.0f;
  std::string early_stopping = "false";
};

SamplingParams flag_params(const GenerateOptions& o, const ModelConfig& config) {
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
  if (o.use_beam_search) {
    // The generation config's sampling defaults do not apply: beam search ranks raw
    // log-probabilities (explicit flags are still checked by validate()).
    p.use_beam_search = true;
    p.n = o.beam_width;
    p.top_p = o.top_p.value_or(1.0f);
    p.top_k = o.top_k.value_or(0);
    p.length_penalty = o.length_penalty;
    p.early_stopping = o.early_stopping == "true"    ? EarlyStopping::kTrue
                       : o.early_stopping == "never" ? EarlyStopping::kNever
                                                     : EarlyStopping::kFalse;
  }
  return p;
}

ordered_json logprobs_json(const std::vector<TokenLogprobs>& list) {
  ordered_json out = ordered_json::array();
  for (const TokenLogprobs& t : list) {
    ordered_json entry = ordered_json::object();
    entry[std::to_string(t.token)] = t.logprob;
    for (const auto& [token, lp] : t.top) entry[std::to_string(token)] = lp;
    out.push_back(std::move(entry));
  }
  return out;
}

ordered_json completion_json(const CompletionOutput& c, bool with_logprobs, bool has_text) {
  ordered_json j;
  j["token_ids"] = c.token_ids;
  j["text"] = has_text ? ordered_json(c.text) : ordered_json(nullptr);  // null: no tokenizer
  j["finish_reason"] = to_string(c.finish_reason);
  j["logprobs"] = with_logprobs ? logprobs_json(c.logprobs) : ordered_json(nullptr);
  if (!c.error.empty()) j["error"] = c.error;
  if (c.beam_score) {
    j["cumulative_logprob"] = *c.cumulative_logprob;
    j["beam_score"] = *c.beam_score;
  }
  return j;
}

/// One result line: completion 0's fields flat (as vLLM's single-completion output), plus all n
/// completions under "outputs" when n > 1.
ordered_json result_json(const std::vector<int32_t>& prompt_ids, const GenerateResult& r,
                         const SamplingParams& p, bool has_text) {
  ordered_json j;
  j["prompt_token_ids"] = prompt_ids;
  const ordered_json first = completion_json(r.outputs.at(0), p.logprobs.has_value(), has_text);
  for (const auto& [k, v] : first.items()) j[k] = v;
  if (p.n > 1) {
    j["outputs"] = ordered_json::array();
    for (const CompletionOutput& c : r.outputs) {
      ordered_json o = completion_json(c, p.logprobs.has_value(), has_text);
      o["index"] = c.index;
      j["outputs"].push_back(std::move(o));
    }
  }
  if (p.prompt_logprobs) {
    j["prompt_logprobs"] = ordered_json::array();
    for (const auto& t : r.prompt_logprobs) {
      j["prompt_logprobs"].push_back(t ? logprobs_json({*t})[0] : ordered_json(nullptr));
    }
  }
  return j;
}

/// Text prompts are tokenized here, once, as the engine would (special tokens included).
std::vector<int32_t> encode(const EngineCore& engine, const std::string& text) {
  if (!engine.tokenizer())
    throw InvalidArgument("prompt: the model has no tokenizer.json; give --tokenizer or token ids");
  return engine.tokenizer()->encode(text, /*add_special_tokens=*/true);
}

std::string dump(const ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// --input FILE: one request per line; results in the same order.
int run_jsonl(const GenerateOptions& o, EngineCore& engine) {
  std::ifstream in(o.input);
  if (!in) throw NotFound(fmt::format("{}: cannot open", o.input));
  std::ofstream file_out;
  if (!o.output.empty()) {
    file_out.open(o.output);
    if (!file_out)
      throw InvalidArgument(fmt::format("--output {}: cannot open for writing", o.output));
  }
  std::ostream& out = o.output.empty() ? std::cout : file_out;
  struct Pending {
    std::shared_ptr<OutputStream> stream;
    SamplingParams params;
    std::vector<int32_t> prompt_ids;
  };
  std::vector<Pending> pending;
  std::string line;
  int line_number = 0;
  static const std::set<std::string> kRequestFields = {"prompt", "prompt_token_ids", "priority",
                                                       "cache_salt", "structured_outputs"};
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} line {}: ", o.input, line_number);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw InvalidArgument(fmt::format("{}malformed JSON: {}", where, e.what()));
    }
    if (!j.is_object()) throw InvalidArgument(where + "must be a JSON object");
    for (const auto& [key, v] : j.items()) {
      if (!kRequestFields.count(key) && !sampling_json_fields().count(key)) {
        throw InvalidArgument(fmt::format("{}unknown field '{}'", where, key));
      }
    }
    EngineRequest r;
    r.params = flag_params(o, engine.model_config());
    read_sampling_params(j, r.params, where);
    if (j.contains("prompt") && j["prompt"].is_string()) {
      r.prompt_token_ids = encode(engine, j["prompt"].get<std::string>());
    } else if (j.contains("prompt_token_ids") && j["prompt_token_ids"].is_array()) {
      for (const auto& id : j["prompt_token_ids"]) {
        if (!id.is_number_integer())
          throw InvalidArgument(where + "field 'prompt_token_ids' must be a list of token ids");
        r.prompt_token_ids.push_back(id.get<int32_t>());
      }
    } else {
      throw InvalidArgument(where +
                            "needs 'prompt' (a string) or 'prompt_token_ids' (a list of ids)");
    }
    if (j.contains("priority")) {
      if (!j["priority"].is_number_integer())
        throw InvalidArgument(where + "field 'priority' must be an integer");
      r.priority = j["priority"].get<int>();
    }
    if (j.contains("cache_salt")) {
      if (!j["cache_salt"].is_string())
        throw InvalidArgument(where + "field 'cache_salt' must be a string");
      r.cache_salt = j["cache_salt"].get<std::string>();
    }
    if (j.contains("structured_outputs")) {
      // As the server reads it, from the line parsed again keeping key order (a schema's
      // property order is the output's).
      const auto ordered = nlohmann::ordered_json::parse(line);
      nlohmann::ordered_json only = nlohmann::ordered_json::object();
      only["structured_outputs"] = ordered["structured_outputs"];
      try {
        if (auto so = openai::read_structured_outputs(only)) {
          openai::check_structured_outputs(so->params, so->param);
          r.params.structured_outputs = std::move(so->params);
        }
      } catch (const openai::ApiException& e) {
        throw InvalidArgument(where + e.what());
      }
    }
    try {
      SamplingParams params = r.params;
      std::vector<int32_t> ids = r.prompt_token_ids;
      pending.push_back({engine.submit(std::move(r)), params, std::move(ids)});
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(where + e.what());
    }
  }
  for (Pending& p : pending)
    out << dump(result_json(p.prompt_ids, collect_result(*p.stream), p.params,
                            engine.tokenizer().has_value()))
        << "\n";
  out.flush();
  return 0;
}

int run_generate(const GenerateOptions& o) {
  const int sources = !o.prompts.empty() + !o.prompt_ids.empty() + !o.input.empty();
  if (sources != 1)
    throw InvalidArgument("give --prompt, --prompt-ids or --input (exactly one of them)");
  EngineArgs args = o.engine.to_engine_args();
  resolve_model_sources(args, o.engine);
  if (o.seed) args.seed = *o.seed;
  EngineCore engine(args);
  if (!o.input.empty()) return run_jsonl(o, engine);

  const SamplingParams params = flag_params(o, engine.model_config());
  std::vector<EngineRequest> requests;
  for (const std::string& text : o.prompts) {
    EngineRequest r;
    r.prompt_token_ids = encode(engine, text);
    r.params = params;
    requests.push_back(std::move(r));
  }
  for (const std::string& ids : o.prompt_ids) {
    EngineRequest r;
    r.prompt_token_ids = parse_ids(ids, "--prompt-ids");
    r.params = params;
    requests.push_back(std::move(r));
  }
  const std::optional<Tokenizer>& tokenizer = engine.tokenizer();
  std::vector<std::vector<int32_t>> prompt_ids;
  for (const EngineRequest& r : requests) prompt_ids.push_back(r.prompt_token_ids);
  // Beam search's choices come at the end, all at once: the best one is printed.
  const bool stream =
      !o.json && requests.size() == 1 && tokenizer.has_value() && !params.use_beam_search;
  std::vector<std::shared_ptr<OutputStream>> streams;
  for (EngineRequest& r : requests) streams.push_back(engine.submit(std::move(r)));
  if (stream) {
    // The prompt, then the completion as it is generated.
    std::cout << tokenizer->decode(prompt_ids[0], /*skip_special_tokens=*/true) << std::flush;
    while (std::optional<RequestOutput> out = streams[0]->next())
      std::cout << out->text << std::flush;
    std::cout << std::endl;
    return 0;
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    const GenerateResult r = collect_result(*streams[i]);
    if (o.json) {
      std::cout << dump(result_json(prompt_ids[i], r, params, tokenizer.has_value())) << "\n";
    } else if (tokenizer) {
      std::cout << tokenizer->decode(prompt_ids[i], true) << r.outputs[0].text << "\n";
    } else {
      std::cout << nlohmann::json(r.outputs[0].token_ids).dump() << "\n";
    }
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace

void register_generate_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Complete prompts offline with the engine");
  add_engine_flags(cmd, opts->engine);
  cmd->add_option("--prompt", opts->prompts, "prompt text (repeatable)");
  cmd->add_option("--prompt-ids", opts->prompt_ids, "prompt as token ids, e.g. 1,2,3 (repeatable)");
  cmd->add_option("--input", opts->input,
                  "JSONL of requests: {\"prompt\" or \"prompt_token_ids\", sampling fields}");
  cmd->add_option("--output", opts->output,
                  "with --input: write the JSONL results here (default: stdout)");
  cmd->add_option("--max-tokens", opts->max_tokens, "tokens to generate at most")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", opts->temperature,
                  "0 = greedy (default: generation_config or 1.0)");
  cmd->add_option("--top-p", opts->top_p, "nucleus sampling mass in (0, 1]");
  cmd->add_option("--top-k", opts->top_k, "sample among the k most likely tokens (0: all)");
  cmd->add_option("--min-p", opts->min_p, "drop tokens below min_p times the top probability");
  cmd->add_option("--seed", opts->seed, "random seed of the sampling (and of dummy weights)");
  cmd->add_flag("--ignore-eos", opts->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_flag("--json", opts->json, "print one JSON object per prompt instead of streaming text");
  cmd->add_option("--logprobs", opts->logprobs,
                  "top-K log-probabilities per generated token (<= 20)");
  cmd->add_flag("--use-beam-search", opts->use_beam_search,
                "beam search (transformers' rules); --json prints every beam under \"outputs\"");
  cmd->add_option("--beam-width", opts->beam_width, "beams with --use-beam-search (the n best)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--length-penalty", opts->length_penalty,
                  "beam scores are sum_logprobs / length ** length_penalty (default 1)");
  cmd->add_option("--early-stopping", opts->early_stopping, "beam search: true, false or never")
      ->check(CLI::IsMember({"true", "false", "never"}));
  cmd->callback([opts, &exit_code] { exit_code = run_generate(*opts); });
}

}  // namespace pagoda::cli
