#pragma once
// tokenizer_config.json (and chat_template.jinja / generation_config.json) beside tokenizer.json:
// the BOS/EOS names, whether to add them, and the chat template.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagoda {

/// The fields of a model directory's tokenizer_config.json that inference needs.
struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::string chat_template;                // the "default" one when a list is given
  std::vector<int32_t> generation_eos_ids;  // generation_config.json eos_token_id, if any
};

/// Reads the optional config files of `dir`; missing files give empty fields, malformed ones
/// throw InvalidArgument naming the file.
[[nodiscard]] TokenizerConfig load_tokenizer_config(const std::string& dir);

}  // namespace pagoda
