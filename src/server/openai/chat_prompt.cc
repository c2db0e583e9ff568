#include "server/openai/chat_prompt.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "core/status.h"
#include "server/openai/api_error.h"
#include "template/error.h"

namespace pagoda::openai {
namespace {

constexpr std::string_view kRoles[] = {"system", "user", "assistant", "tool", "developer"};

void require_type(bool ok, const std::string& param, const char* expected) {
  if (!ok) throw bad_request(fmt::format("'{}' must be {}", param, expected), param);
}

// content: a string, null (assistant only) or a list of {"type": "text", "text": ...} parts.
Json read_content(const Json& message, const std::string& role, const std::string& where) {
  const std::string param = field_path(where, "content");
  const Json* content = find_field(message, "content");
  if (!content) {
    if (role != "assistant") {
      throw bad_request(fmt::format("'{}' is required for role '{}'", param, role), param);
    }
    return nullptr;
  }
  if (content->is_string()) return *content;
  require_type(content->is_array(), param, "a string or a list of content parts");
  std::string text;
  for (size_t j = 0; j < content->size(); ++j) {
    const Json& part = (*content)[j];
    const std::string part_param = field_path(param, j);
    require_type(part.is_object(), part_param, "an object");
    const std::optional<std::string> type =
        get_string(part, "type", field_path(part_param, "type"));
    if (!type) {
      throw bad_request(fmt::format("'{}' is required", field_path(part_param, "type")),
                        field_path(part_param, "type"));
    }
    if (*type != "text") {
      throw bad_request(
          fmt::format("Content part type '{}' is not supported: only 'text' is", *type),
          field_path(part_param, "type"));
    }
    reject_unknown_keys(part, {"type", "text"}, part_param);
    const std::optional<std::string> part_text =
        get_string(part, "text", field_path(part_param, "text"));
    if (!part_text) {
      throw bad_request(fmt::format("'{}' is required", field_path(part_param, "text")),
                        field_path(part_param, "text"));
    }
    if (j > 0) text += '\n';
    text += *part_text;
  }
  return text;
}

Json read_tool_calls(const Json& calls, const std::string& param) {
  require_type(calls.is_array(), param, "a list of tool calls");
  Json out = Json::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string where = field_path(param, j);
    const Json& call = calls[j];
    require_type(call.is_object(), where, "an object");
    reject_unknown_keys(call, {"id", "type", "function", "index"}, where);
    Json normalized = call;
    (void)get_string(call, "id", field_path(where, "id"));
    if (auto type = get_string(call, "type", field_path(where, "type"));
        type && *type != "function") {
      throw bad_request(fmt::format("'{}' must be \"function\"", field_path(where, "type")),
                        field_path(where, "type"));
    }
    const std::string fn_param = field_path(where, "function");
    const Json* fn = find_field(call, "function");
    if (!fn) throw bad_request(fmt::format("'{}' is required", fn_param), fn_param);
    require_type(fn->is_object(), fn_param, "an object");
    reject_unknown_keys(*fn, {"name", "arguments"}, fn_param);
    if (!get_string(*fn, "name", field_path(fn_param, "name"))) {
      throw bad_request(fmt::format("'{}' is required", field_path(fn_param, "name")),
                        field_path(fn_param, "name"));
    }
    const std::string args_param = field_path(fn_param, "arguments");
    if (const Json* args = find_field(*fn, "arguments")) {
      if (args->is_string()) {
        // Templates render arguments with tojson: hand them the object, as vLLM does.
        normalized["function"]["arguments"] =
            parse_json_value(args->get_ref<const std::string&>(), args_param);
      } else {
        require_type(args->is_object(), args_param, "a JSON string or an object");
      }
    }
    out.push_back(std::move(normalized));
  }
  return out;
}

Json read_message(const Json& message, const std::string& where) {
  require_type(message.is_object(), where, "an object");
  reject_unknown_keys(message,
                      {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content",
                       "reasoning", "refusal", "annotations", "audio", "function_call"},
                      where);
  const std::string role_param = field_path(where, "role");
  const std::optional<std::string> role = get_string(message, "role", role_param);
  if (!role) throw bad_request(fmt::format("'{}' is required", role_param), role_param);
  if (std::find(std::begin(kRoles), std::end(kRoles), *role) == std::end(kRoles)) {
    throw bad_request(fmt::format("Unknown role '{}': expected system, user, assistant, tool or "
                                  "developer",
                                  *role),
                      role_param);
  }
  Json out = Json::object();
  out["role"] = *role;
  out["content"] = read_content(message, *role, where);
  if (auto name = get_string(message, "name", field_path(where, "name"))) out["name"] = *name;
  if (const Json* calls = find_field(message, "tool_calls")) {
    if (*role != "assistant") {
      throw bad_request("Only assistant messages may have 'tool_calls'",
                        field_path(where, "tool_calls"));
    }
    out["tool_calls"] = read_tool_calls(*calls, field_path(where, "tool_calls"));
  }
  if (auto id = get_string(message, "tool_call_id", field_path(where, "tool_call_id"))) {
    out["tool_call_id"] = *id;
  }
  for (const char* key : {"reasoning_content", "reasoning", "refusal"}) {
    if (auto text = get_string(message, key, field_path(where, key))) out[key] = *text;
  }
  return out;
}

void check_tool(const Json& tool, const std::string& where) {
  require_type(tool.is_object(), where, "an object");
  reject_unknown_keys(tool, {"type", "function"}, where);
  const std::optional<std::string> type = get_string(tool, "type", field_path(where, "type"));
  if (type && *type != "function") {
    throw bad_request(fmt::format("'{}' must be \"function\"", field_path(where, "type")),
                      field_path(where, "type"));
  }
  const std::string fn_param = field_path(where, "function");
  const Json* fn = find_field(tool, "function");
  if (!fn) throw bad_request(fmt::format("'{}' is required", fn_param), fn_param);
  require_type(fn->is_object(), fn_param, "an object");
  reject_unknown_keys(*fn, {"name", "description", "parameters", "strict"}, fn_param);
  if (!get_string(*fn, "name", field_path(fn_param, "name"))) {
    throw bad_request(fmt::format("'{}' is required", field_path(fn_param, "name")),
                      field_path(fn_param, "name"));
  }
  (void)get_string(*fn, "description", field_path(fn_param, "description"));
  (void)get_bool(*fn, "strict", field_path(fn_param, "strict"));
  if (const Json* params = find_field(*fn, "parameters")) {
    require_type(params->is_object(), field_path(fn_param, "parameters"), "an object");
  }
}

std::string read_tool_choice(const Json& body, const std::optional<Json>& tools) {
  const Json* choice = find_field(body, "tool_choice");
  if (!choice) return tools ? "auto" : "none";
  std::string result;
  if (choice->is_string()) {
    result = choice->get<std::string>();
    if (result != "none" && result != "auto" && result != "required") {
      throw bad_request(
          "'tool_choice' must be \"none\", \"auto\", \"required\" or a named function",
          "tool_choice");
    }
  } else {
    require_type(choice->is_object(), "tool_choice", "a string or an object");
    reject_unknown_keys(*choice, {"type", "function"}, "tool_choice");
    const Json* fn = find_field(*choice, "function");
    require_type(fn && fn->is_object(), "tool_choice.function", "an object naming a function");
    reject_unknown_keys(*fn, {"name"}, "tool_choice.function");
    const std::optional<std::string> name = get_string(*fn, "name", "tool_choice.function.name");
    if (!name) throw bad_request("'tool_choice.function.name' is required", "tool_choice");
    bool found = false;
    if (tools) {
      for (const Json& tool : *tools) found = found || tool.at("function").at("name") == *name;
    }
    if (!found) {
      throw bad_request(fmt::format("Tool '{}' named in 'tool_choice' is not in 'tools'", *name),
                        "tool_choice");
    }
    result = *name;
  }
  if (result != "none" && !tools) {
    throw bad_request("When using `tool_choice`, `tools` must be set.", "tool_choice");
  }
  return result;
}

std::string_view strip(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

}  // namespace

ChatConversation read_chat_conversation(const Json& body, const ServerContext& ctx) {
  ChatConversation c;
  const Json* messages = find_field(body, "messages");
  if (!messages) throw bad_request("Field 'messages' is required", "messages");
  require_type(messages->is_array(), "messages", "a list of messages");
  if (messages->empty()) throw bad_request("'messages' must not be empty", "messages");
  for (size_t i = 0; i < messages->size(); ++i) {
    c.messages.push_back(read_message((*messages)[i], field_path("messages", i)));
  }
  if (const Json* tools = find_field(body, "tools")) {
    require_type(tools->is_array(), "tools", "a list of tools");
    for (size_t i = 0; i < tools->size(); ++i) check_tool((*tools)[i], field_path("tools", i));
    c.tools = *tools;
  }
  c.tool_choice = read_tool_choice(body, c.tools);
  const Json* tool_choice = find_field(body, "tool_choice");
  c.tool_choice_is_function = tool_choice && tool_choice->is_object();
  if (const Json* documents = find_field(body, "documents")) {
    require_type(documents->is_array(), "documents", "a list of objects");
    for (size_t i = 0; i < documents->size(); ++i) {
      require_type((*documents)[i].is_object(), field_path("documents", i), "an object");
    }
    c.documents = *documents;
  }
  const std::optional<bool> add_generation_prompt =
      get_bool(body, "add_generation_prompt", "add_generation_prompt");
  c.continue_final_message =
      get_bool(body, "continue_final_message", "continue_final_message").value_or(false);
  if (c.continue_final_message && add_generation_prompt.value_or(false)) {
    throw bad_request(
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        "continue_final_message");
  }
  c.add_generation_prompt = add_generation_prompt.value_or(!c.continue_final_message);
  c.chat_template = get_string(body, "chat_template", "chat_template");
  if (const Json* kwargs = find_field(body, "chat_template_kwargs")) {
    require_type(kwargs->is_object(), "chat_template_kwargs", "an object");
    c.chat_template_kwargs = *kwargs;
  }
  // transformers takes a chat_template keyword as the template itself (vLLM passes the kwargs
  // through): honour it as the request's template, under the same trust rule.
  const char* template_param = "chat_template";
  if (c.chat_template_kwargs.contains("chat_template") &&
      !c.chat_template_kwargs["chat_template"].is_null()) {
    const Json& t = c.chat_template_kwargs["chat_template"];
    require_type(t.is_string(), "chat_template_kwargs.chat_template", "a string");
    if (!c.chat_template) {
      c.chat_template = t.get<std::string>();
      template_param = "chat_template_kwargs";
    }
  }
  c.chat_template_kwargs.erase("chat_template");
  if (c.chat_template && !ctx.allow_request_chat_template) {
    throw bad_request(
        "Chat template is passed with request, but --trust-request-chat-template is not set. "
        "Refused request with untrusted chat template.",
        template_param);
  }
  return c;
}

std::string render_chat_prompt(const ChatConversation& c, const ServerContext& ctx) {
  std::unique_ptr<tmpl::ChatTemplate> own;
  const tmpl::ChatTemplate* chat = ctx.chat_template;
  if (c.chat_template) {
    try {
      own = std::make_unique<tmpl::ChatTemplate>(*c.chat_template);
    } catch (const tmpl::TemplateError& e) {
      throw bad_request(fmt::format("Invalid chat template: {}", e.what()), "chat_template");
    } catch (const std::logic_error&) {
      // The template library lets a few standard exceptions out on odd input (std::stoul on a
      // bad \x escape); a request's own template is still the client's fault.
      throw bad_request("Invalid chat template", "chat_template");
    }
    chat = own.get();
  }
  if (!chat) throw bad_request("This model has no chat template", "messages");
  tmpl::ChatTemplateInputs inputs;
  inputs.messages = c.messages;
  inputs.tools = c.tools;
  inputs.documents = c.documents;
  inputs.add_generation_prompt = c.add_generation_prompt;
  if (ctx.tokenizer) {
    inputs.bos_token = ctx.tokenizer->bos_token();
    inputs.eos_token = ctx.tokenizer->eos_token();
  }
  inputs.extra = c.chat_template_kwargs;
  inputs.render.limits = ctx.render_limits;
  std::string rendered;
  try {
    rendered = chat->render(inputs);
  } catch (const tmpl::TemplateRaised& e) {
    throw bad_request(e.what());  // the template's words are the message (e.g. roles alternate)
  } catch (const tmpl::TemplateError& e) {
    throw bad_request(fmt::format("Chat template error: {}", e.what()));
  } catch (const InvalidArgument& e) {
    throw bad_request(e.what(), "chat_template_kwargs");
  } catch (const std::logic_error&) {
    if (!own) throw;  // the model's own template failing is our bug: a 500
    throw bad_request("Chat template error", "chat_template");
  }
  if (!c.continue_final_message) return rendered;
  // transformers: cut right after the final message's (stripped) text, so that the model
  // continues it instead of starting a new turn.
  const Json& content = c.messages.back()["content"];
  const std::string_view text =
      content.is_string() ? strip(content.get_ref<const std::string&>()) : std::string_view();
  if (text.empty()) {
    throw bad_request("continue_final_message is set but the final message has no text to continue",
                      "continue_final_message");
  }
  const size_t at = rendered.rfind(text);
  if (at == std::string::npos) {
    throw bad_request(
        "continue_final_message is set but the final message does not appear in the rendered chat",
        "continue_final_message");
  }
  rendered.resize(at + text.size());
  return rendered;
}

}  // namespace pagoda::openai
