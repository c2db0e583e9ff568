#include "cli/speculative_config.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/json_flag.h"
#include "core/status.h"
#include "engine/speculation.h"

namespace pagoda::cli {
namespace {

using nlohmann::json;

// vLLM's methods that pagoda does not run yet (SpeculativeMethod and its MTP model types).
constexpr std::array kLaterMethods = {
    "medusa",    "mlp_speculator", "suffix",       "mtp",
    "ngram_gpu", "dflash",         "custom_class", "extract_hidden_states"};

// The methods whose drafts come from a model directory (engine/speculation.h).
constexpr std::array kModelMethods = {"draft_model", "parallel_draft", "eagle", "eagle3"};

// vLLM keys that change nothing pagoda does (logging, parallelism of a draft model it would not
// run, ...); accepted so that a vLLM command line runs.
constexpr std::array kAcceptedKeys = {"disable_log_stats", "disable_logprobs",
                                      "disable_padded_drafter_batch", "draft_tensor_parallel_size",
                                      "code_revision"};

std::optional<int> int_field(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number_integer())
    throw InvalidArgument(fmt::format("{} must be an integer, got {}", key, j[key].dump()));
  return j[key].get<int>();
}

}  // namespace

SpeculativeConfig parse_speculative_config(std::string_view text) {
  json j = parse_json_object(text);
  std::string method, model;
  if (j.contains("method") && !j["method"].is_null()) {
    if (!j["method"].is_string()) throw InvalidArgument("method must be a string");
    method = j["method"].get<std::string>();
  }
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) throw InvalidArgument("model must be a string");
    model = j["model"].get<std::string>();
  }
  if (method.empty() && (model == "ngram" || model == "[ngram]")) method = "ngram";
  if (method == "[ngram]") method = "ngram";
  if (method.empty() && !model.empty()) method = "draft_model";  // vLLM detects the kind
  if (method.empty()) throw InvalidArgument("method is required (ngram)");
  const bool later =
      std::find(kLaterMethods.begin(), kLaterMethods.end(), method) != kLaterMethods.end() ||
      method.ends_with("_mtp") || method.starts_with("dflash");
  if (later) {
    throw InvalidArgument(fmt::format(
        "method '{}'{} is not supported by pagoda yet: only ngram (prompt lookup), draft_model, "
        "parallel_draft, eagle and eagle3",
        method,
        model.empty() || model == "ngram" || model == "[ngram]"
            ? ""
            : fmt::format(" (model {})", model)));
  }
  const bool model_method =
      std::find(kModelMethods.begin(), kModelMethods.end(), method) != kModelMethods.end();
  if (method != "ngram" && !model_method) {
    throw InvalidArgument(
        fmt::format("unknown method '{}' (vLLM's: ngram, draft_model, eagle, "
                    "eagle3, medusa, mlp_speculator, mtp, suffix, ...; pagoda's parallel_draft)",
                    method));
  }
  for (const auto& [key, value] : j.items()) {
    static constexpr std::array kKnown = {"method",
                                          "model",
                                          "num_speculative_tokens",
                                          "prompt_lookup_min",
                                          "prompt_lookup_max",
                                          "adaptive",
                                          "revision",
                                          "draft_row_cost",
                                          "bench_acceptance_rate",
                                          "quantization",
                                          "enforce_eager"};
    if (std::find(kKnown.begin(), kKnown.end(), key) != kKnown.end() ||
        std::find(kAcceptedKeys.begin(), kAcceptedKeys.end(), key) != kAcceptedKeys.end())
      continue;
    throw InvalidArgument(fmt::format("key '{}' is not supported by pagoda", key));
  }
  if (j.contains("draft_tensor_parallel_size") && !j["draft_tensor_parallel_size"].is_null() &&
      j["draft_tensor_parallel_size"] != 1) {
    throw InvalidArgument("draft_tensor_parallel_size: only 1");
  }
  SpeculativeConfig c;
  c.method = method;
  const std::optional<int> k = int_field(j, "num_speculative_tokens");
  if (!k)
    throw InvalidArgument(fmt::format("num_speculative_tokens is required with method {}", method));
  c.num_speculative_tokens = *k;
  if (model_method) {
    if (model.empty()) {
      throw InvalidArgument(
          fmt::format("model is required with method {} (the draft's directory)", method));
    }
    for (const char* key : {"prompt_lookup_min", "prompt_lookup_max"}) {
      if (j.contains(key))
        throw InvalidArgument(fmt::format("{} applies to method ngram only", key));
    }
    c.model = model;
    if (j.contains("revision") && !j["revision"].is_null()) {
      if (!j["revision"].is_string()) throw InvalidArgument("revision must be a string");
      c.revision = j["revision"].get<std::string>();
    }
  }  // ngram: revision has no meaning (accepted, as vLLM does)
  std::optional<int> lo = int_field(j, "prompt_lookup_min");
  std::optional<int> hi = int_field(j, "prompt_lookup_max");
  if (!lo && !hi) lo = hi = 5;  // vLLM's defaults
  c.prompt_lookup_min = lo.value_or(*hi);
  c.prompt_lookup_max = hi.value_or(*lo);
  if (j.contains("adaptive")) {
    if (!j["adaptive"].is_boolean()) throw InvalidArgument("adaptive must be true or false");
    c.adaptive = j["adaptive"].get<bool>();
  }
  if (j.contains("quantization") && !j["quantization"].is_null()) {
    if (!j["quantization"].is_string()) throw InvalidArgument("quantization must be a string");
    if (!model_method)
      throw InvalidArgument(fmt::format("quantization applies to a draft model, not {}", method));
    c.quantization = j["quantization"].get<std::string>();
  }
  if (j.contains("enforce_eager") && !j["enforce_eager"].is_null()) {
    if (!j["enforce_eager"].is_boolean())
      throw InvalidArgument("enforce_eager must be true or false");
    c.enforce_eager = j["enforce_eager"].get<bool>();
  }
  if (j.contains("bench_acceptance_rate")) {
    if (!j["bench_acceptance_rate"].is_number())
      throw InvalidArgument("bench_acceptance_rate must be a number");
    c.bench_acceptance_rate = j["bench_acceptance_rate"].get<double>();
  }
  if (j.contains("draft_row_cost")) {
    if (!j["draft_row_cost"].is_number()) throw InvalidArgument("draft_row_cost must be a number");
    c.draft_row_cost = j["draft_row_cost"].get<double>();
  }
  validate_speculative_config(c);
  return c;
}

}  // namespace pagoda::cli
