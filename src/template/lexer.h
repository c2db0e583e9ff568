#pragma once
// Splits template source into tokens the way Jinja2's lexer does, applying whitespace control
// ("-" and "+" markers) and Hugging Face's trim_blocks / lstrip_blocks settings while scanning.
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::tmpl {

enum class TokenType {
  kText,        // literal template text (already whitespace-trimmed)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // value holds the unescaped string
  kInt,
  kFloat,
  kOperator,
  kEof,
};

/// One token with the 1-based line where it starts.
struct Token {
  TokenType type;
  std::string value;
  int line;
};

/// Lexer settings; the defaults are Hugging Face's chat-template environment.
struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

/// Tokenizes a whole template; throws TemplateError on unterminated tags or strings.
[[nodiscard]] std::vector<Token> tokenize(std::string_view source, const LexerOptions& options);

/// A human-readable description of a token for syntax errors ("end of print statement").
[[nodiscard]] std::string describe_token(const Token& token);

}  // namespace pagoda::tmpl
