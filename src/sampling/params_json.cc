#include "sampling/params_json.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace pagoda {
namespace {

using nlohmann::json;

[[noreturn]] void type_error(const std::string& where, const std::string& field, const char* what) {
  throw InvalidArgument(fmt::format("{}field '{}' must be {}", where, field, what));
}

float number(const json& v, const std::string& where, const std::string& field) {
  if (!v.is_number()) type_error(where, field, "a number");
  return v.get<float>();
}

int64_t integer(const json& v, const std::string& where, const std::string& field, int64_t lo,
                int64_t hi) {
  // JSON numbers like 3.0 are accepted as integers, as Python's pydantic does for int fields.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::floor(d) != d) type_error(where, field, "an integer");
  } else if (!v.is_number_integer()) {
    type_error(where, field, "an integer");
  }
  const double d = v.get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
    throw InvalidArgument(fmt::format("{}field '{}' is out of range: {}", where, field, v.dump()));
  }
  return v.is_number_float() ? static_cast<int64_t>(d) : v.get<int64_t>();
}

std::vector<int32_t> token_list(const json& v, const std::string& where, const std::string& field) {
  if (!v.is_array()) type_error(where, field, "a list of token ids");
  std::vector<int32_t> ids;
  for (const json& x : v)
    ids.push_back(static_cast<int32_t>(integer(x, where, field, 0, INT32_MAX)));
  return ids;
}

}  // namespace

const std::set<std::string>& sampling_json_fields() {
  static const std::set<std::string> fields = {"n",
                                               "temperature",
                                               "top_p",
                                               "top_k",
                                               "min_p",
                                               "presence_penalty",
                                               "frequency_penalty",
                                               "repetition_penalty",
                                               "logit_bias",
                                               "seed",
                                               "stop",
                                               "stop_token_ids",
                                               "ignore_eos",
                                               "skip_special_tokens",
                                               "max_tokens",
                                               "min_tokens",
                                               "logprobs",
                                               "prompt_logprobs",
                                               "bad_words",
                                               "allowed_token_ids",
                                               "use_beam_search",
                                               "length_penalty",
                                               "early_stopping"};
  return fields;
}

void read_sampling_params(const json& j, SamplingParams& p, const std::string& where) {
  PAGODA_CHECK(j.is_object());
  for (const auto& [key, v] : j.items()) {
    if (v.is_null()) continue;  // an explicit null means "the default", as in OpenAI clients
    if (key == "n") {
      p.n = static_cast<int>(integer(v, where, key, INT32_MIN, INT32_MAX));
    } else if (key == "temperature") {
      p.temperature = number(v, where, key);
    } else if (key == "top_p") {
      p.top_p = number(v, where, key);
    } else if (key == "top_k") {
      p.top_k = static_cast<int>(integer(v, where, key, INT32_MIN, INT32_MAX));
    } else if (key == "min_p") {
      p.min_p = number(v, where, key);
    } else if (key == "presence_penalty") {
      p.presence_penalty = number(v, where, key);
    } else if (key == "frequency_penalty") {
      p.frequency_penalty = number(v, where, key);
    } else if (key == "repetition_penalty") {
      p.repetition_penalty = number(v, where, key);
    } else if (key == "logit_bias") {
      if (!v.is_object()) type_error(where, key, "an object mapping token ids to biases");
      p.logit_bias.clear();
      for (const auto& [token, bias] : v.items()) {
        int64_t id = -1;
        try {
          size_t used = 0;
          id = std::stoll(token, &used);
          if (used != token.size()) id = -1;
        } catch (const std::exception&) {
          id = -1;
        }
        if (id < 0 || id > INT32_MAX) {
          throw InvalidArgument(fmt::format(
              "{}field 'logit_bias' has a key that is not a token id: '{}'", where, token));
        }
        p.logit_bias[static_cast<int32_t>(id)] = number(bias, where, "logit_bias");
      }
    } else if (key == "seed") {
      p.seed = static_cast<uint64_t>(integer(v, where, key, std::numeric_limits<int64_t>::min(),
                                             std::numeric_limits<int64_t>::max()));
    } else if (key == "stop") {
      p.stop.clear();
      if (v.is_string()) {
        p.stop.push_back(v.get<std::string>());
      } else if (v.is_array()) {
        for (const json& s : v) {
          if (!s.is_string()) type_error(where, key, "a string or a list of strings");
          p.stop.push_back(s.get<std::string>());
        }
      } else {
        type_error(where, key, "a string or a list of strings");
      }
    } else if (key == "bad_words") {
      p.bad_words.clear();
      if (!v.is_array()) type_error(where, key, "a list of strings");
      for (const json& w : v) {
        if (!w.is_string()) type_error(where, key, "a list of strings");
        p.bad_words.push_back(w.get<std::string>());
      }
    } else if (key == "allowed_token_ids") {
      p.allowed_token_ids = token_list(v, where, key);
    } else if (key == "stop_token_ids") {
      p.stop_token_ids = token_list(v, where, key);
    } else if (key == "ignore_eos") {
      if (!v.is_boolean()) type_error(where, key, "true or false");
      p.ignore_eos = v.get<bool>();
    } else if (key == "skip_special_tokens") {
      if (!v.is_boolean()) type_error(where, key, "true or false");
      p.skip_special_tokens = v.get<bool>();
    } else if (key == "max_tokens") {
      p.max_tokens = static_cast<int>(integer(v, where, key, INT32_MIN, INT32_MAX));
    } else if (key == "min_tokens") {
      p.min_tokens = static_cast<int>(integer(v, where, key, INT32_MIN, INT32_MAX));
    } else if (key == "logprobs") {
      p.logprobs = static_cast<int>(integer(v, where, key, INT32_MIN, INT32_MAX));
    } else if (key == "prompt_logprobs") {
      p.prompt_logprobs = static_cast<int>(integer(v, where, key, INT32_MIN, INT32_MAX));
    } else if (key == "use_beam_search") {
      if (!v.is_boolean()) type_error(where, key, "true or false");
      p.use_beam_search = v.get<bool>();
    } else if (key == "length_penalty") {
      p.length_penalty = number(v, where, key);
    } else if (key == "early_stopping") {
      // transformers' and vLLM's values: true, false or "never".
      if (v.is_boolean()) {
        p.early_stopping = v.get<bool>() ? EarlyStopping::kTrue : EarlyStopping::kFalse;
      } else if (v.is_string() && v.get<std::string>() == "never") {
        p.early_stopping = EarlyStopping::kNever;
      } else {
        type_error(where, key, "true, false or \"never\"");
      }
    }
  }
}

}  // namespace pagoda
