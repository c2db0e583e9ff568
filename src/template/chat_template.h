#pragma once
// Chat templates the way Hugging Face transformers' apply_chat_template renders them: the
// template sees `messages`, `tools` and `documents` (None when not given),
// `add_generation_prompt`, the special tokens `bos_token` / `eos_token`, and any extra
// chat_template_kwargs.
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "template/template.h"

namespace pagoda::tmpl {

/// The template for models that ship none: one "<role>: <content>\n" line per message (text
/// parts of list contents are joined), then "assistant:" when a generation prompt is asked for.
inline constexpr std::string_view kDefaultChatTemplate =
    "{%- for message in messages -%}\n"
    "{%- if message.content is string -%}{%- set text = message.content -%}\n"
    "{%- elif message.content is iterable and message.content is not mapping -%}\n"
    "{%- set text = message.content | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | join('') -%}\n"
    "{%- else -%}{%- set text = '' -%}{%- endif -%}\n"
    "{{- message.role ~ ': ' ~ text ~ '\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}assistant:{%- endif -%}\n";

/// What a chat template is rendered with.
struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;      // None when absent, as in transformers
  std::optional<nlohmann::ordered_json> documents;  // None when absent
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  /// chat_template_kwargs: extra variables (may override bos_token/eos_token, not the others).
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  RenderOptions render;
};

/// A compiled chat template; render() is const and safe to call from many threads.
class ChatTemplate {
 public:
  /// Parses the template (kDefaultChatTemplate when source is empty); throws TemplateError.
  explicit ChatTemplate(std::string_view source);

  /// Renders a conversation; throws TemplateError (TemplateRaised for raise_exception) or
  /// InvalidArgument for malformed inputs.
  [[nodiscard]] std::string render(const ChatTemplateInputs& inputs) const;

  /// The variables render() passes to the template, as one JSON object.
  [[nodiscard]] static nlohmann::ordered_json make_context(const ChatTemplateInputs& inputs);

 private:
  Template template_;
};

/// Parses and renders in one go (prefer ChatTemplate to parse once and render many times).
[[nodiscard]] std::string render_chat_template(std::string_view source,
                                               const ChatTemplateInputs& inputs);

}  // namespace pagoda::tmpl
