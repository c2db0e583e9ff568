#pragma once
// The public face of the Jinja interpreter: parse a template once, render it many times.
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "template/error.h"
#include "template/evaluator.h"
#include "template/lexer.h"

namespace pagoda::tmpl {

/// A parsed template; immutable, so one instance may render on many threads at once.
class Template {
 public:
  /// Parses source; throws TemplateError (with the line) on a syntax error.
  explicit Template(std::string_view source, const LexerOptions& options = {});

  /// Renders with the keys of `context` (a JSON object) as variables; keys absent from it are
  /// undefined, JSON null is Python's None. Throws TemplateError on a runtime error.
  [[nodiscard]] std::string render(const nlohmann::ordered_json& context,
                                   const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace pagoda::tmpl
