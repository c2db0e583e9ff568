#include "template/template.h"

#include "template/parser.h"

namespace pagoda::tmpl {

Template::Template(std::string_view source, const LexerOptions& options)
    : body_(std::make_shared<const Body>(parse_template(source, options))) {}

std::string Template::render(const nlohmann::ordered_json& context,
                             const RenderOptions& options) const {
  if (!context.is_object()) throw TemplateError("template context must be a JSON object", 0);
  auto globals = std::make_shared<Scope>(nullptr);
  add_globals(*globals);
  auto root = std::make_shared<Scope>(globals);
  for (const auto& [key, value] : context.items()) root->set(key, from_json(value));
  std::string out;
  Evaluator evaluator(options, root);
  evaluator.render(*body_, out);
  return out;
}

}  // namespace pagoda::tmpl
