#pragma once
// Shared fixtures of the protocol tests: the stories260K tokenizer (vocabulary 512, BOS 1), a real
// chat template (Qwen2.5's) and a ServerContext serving "stories260K" with max_model_len 512.
#include <optional>
#include <string>

#include "core/mapped_file.h"
#include "pagoda/request_output.h"
#include "server/openai/server_context.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::openai::testing {

inline std::string read_file(const std::string& path) { return read_text_file(path); }

inline const Tokenizer& tokenizer() {
  static const Tokenizer tok = Tokenizer::load(PAGODA_SOURCE_DIR "/models/stories260K");
  return tok;
}

inline const tmpl::ChatTemplate& qwen_template() {
  static const tmpl::ChatTemplate chat(read_file(
      PAGODA_SOURCE_DIR "/tests/data/chat_templates/templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
  return chat;
}

inline ServerContext context() {
  ServerContext ctx;
  ctx.served_model_names = {"stories260K", "alias"};
  ctx.max_model_len = 512;
  ctx.vocab_size = 512;
  ctx.tokenizer = &tokenizer();
  ctx.chat_template = &qwen_template();
  ctx.model_created = 1700000000;
  return ctx;
}

/// An engine update of choice 0 carrying one token and `text` (a model's output that the demo model
/// cannot write: tool calls, reasoning).
inline RequestOutput text_update(std::string text,
                                 std::optional<FinishReason> finish = std::nullopt) {
  RequestOutput out;
  out.index = 0;
  out.token_ids = {5};
  out.text = std::move(text);
  out.finish_reason = finish;
  return out;
}

}  // namespace pagoda::openai::testing
