#pragma once
// Recursive-descent parser from tokens to the syntax tree, following Jinja2's grammar and its
// operator precedence (or < and < not < comparisons < + - < ~ < * / // % < ** < unary < postfix).
#include <string_view>

#include "template/ast.h"
#include "template/lexer.h"

namespace pagoda::tmpl {

/// Deepest nesting of expressions and blocks the parser accepts (hostile templates).
inline constexpr int kMaxParseDepth = 200;

/// Parses a whole template into its top-level body; throws TemplateError with the line.
[[nodiscard]] Body parse_template(std::string_view source, const LexerOptions& options);

}  // namespace pagoda::tmpl
