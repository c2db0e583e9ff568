#include "template/chat_template.h"

#include "core/status.h"

namespace pagoda::tmpl {

ChatTemplate::ChatTemplate(std::string_view source)
    : template_(source.empty() ? kDefaultChatTemplate : source) {}

nlohmann::ordered_json ChatTemplate::make_context(const ChatTemplateInputs& inputs) {
  if (!inputs.messages.is_array()) throw InvalidArgument("messages must be a JSON array");
  if (!inputs.extra.is_object()) throw InvalidArgument("chat template kwargs must be an object");
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = inputs.messages;
  context["tools"] = inputs.tools.value_or(nullptr);
  context["documents"] = inputs.documents.value_or(nullptr);
  context["add_generation_prompt"] = inputs.add_generation_prompt;
  context["bos_token"] = inputs.bos_token;
  context["eos_token"] = inputs.eos_token;
  for (const auto& [key, value] : inputs.extra.items()) {
    if (key == "messages" || key == "tools" || key == "documents" ||
        key == "add_generation_prompt") {
      throw InvalidArgument("chat template kwarg '" + key + "' clashes with a reserved variable");
    }
    context[key] = value;
  }
  return context;
}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  return template_.render(make_context(inputs), inputs.render);
}

std::string render_chat_template(std::string_view source, const ChatTemplateInputs& inputs) {
  return ChatTemplate(source).render(inputs);
}

}  // namespace pagoda::tmpl
