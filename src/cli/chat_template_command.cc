// `pagoda chat-template`: render a chat template the way transformers' apply_chat_template does,
// to check a model's template or to see exactly what prompt a conversation becomes.
//
//   pagoda chat-template --template FILE --messages JSON [--add-generation-prompt]
//                        [--tools JSON] [--bos-token S] [--eos-token S] [--var KEY=JSON ...]
//
// JSON arguments are inline JSON, or @PATH to read the JSON from a file. The render goes to stdout
// exactly (no newline added); an error the template raises goes to stderr with exit status 1.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "template/chat_template.h"

namespace pagoda::cli {

namespace {

struct ChatTemplateOptions {
  std::string template_path;
  std::string messages;
  std::string tools;
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  std::vector<std::string> vars;
};

nlohmann::ordered_json parse_json_arg(const std::string& flag, const std::string& value) {
  const std::string text =
      !value.empty() && value[0] == '@' ? read_text_file(value.substr(1)) : value;
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(flag + ": malformed JSON: " + e.what());
  }
}

int run_chat_template(const ChatTemplateOptions& opts) {
  tmpl::ChatTemplateInputs inputs;
  inputs.messages = parse_json_arg("--messages", opts.messages);
  if (!opts.tools.empty()) inputs.tools = parse_json_arg("--tools", opts.tools);
  inputs.add_generation_prompt = opts.add_generation_prompt;
  inputs.bos_token = opts.bos_token;
  inputs.eos_token = opts.eos_token;
  for (const std::string& var : opts.vars) {
    const size_t eq = var.find('=');
    if (eq == std::string::npos || eq == 0) throw InvalidArgument("--var expects KEY=JSON: " + var);
    inputs.extra[var.substr(0, eq)] =
        parse_json_arg("--var " + var.substr(0, eq), var.substr(eq + 1));
  }
  const std::string source = read_text_file(opts.template_path);
  try {
    const tmpl::ChatTemplate chat(source);
    const std::string out = chat.render(inputs);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    return 0;
  } catch (const tmpl::TemplateError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace

void register_chat_template_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ChatTemplateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "chat-template", "Render a chat template (Jinja) for a conversation, as transformers does");
  cmd->add_option("--template", opts->template_path, "Chat template file (Jinja)")->required();
  cmd->add_option("--messages", opts->messages, "Messages as a JSON array, or @FILE")->required();
  cmd->add_flag("--add-generation-prompt", opts->add_generation_prompt,
                "Append the assistant turn's opening");
  cmd->add_option("--tools", opts->tools, "Tool definitions as a JSON array, or @FILE");
  cmd->add_option("--bos-token", opts->bos_token, "The bos_token variable");
  cmd->add_option("--eos-token", opts->eos_token, "The eos_token variable");
  cmd->add_option("--var", opts->vars, "Extra template variable KEY=JSON (repeatable)");
  cmd->callback([opts, &exit_code] { exit_code = run_chat_template(*opts); });
}

}  // namespace pagoda::cli
