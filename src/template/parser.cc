#include "template/parser.h"
#include "template/numbers.h"

#include <charconv>
#include <initializer_list>
#include <string>

#include "template/error.h"

namespace pagoda::tmpl {

namespace {

ExprPtr make_expr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

std::unique_ptr<Stmt> make_stmt(StmtKind kind, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->line = line;
  return s;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse() {
    std::string end_tag;
    Body body = parse_body({}, end_tag);
    return body;
  }

 private:
  // RAII nesting counter, so hostile templates fail cleanly instead of exhausting the stack.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) p_.fail("template nested too deeply");
    }
    ~DepthGuard() { --p_.depth_; }

   private:
    Parser& p_;
  };

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }

  [[noreturn]] void fail(const std::string& message) const {
    throw TemplateError("syntax error: " + message, cur().line);
  }

  bool is_op(const char* op) const {
    return cur().type == TokenType::kOperator && cur().value == op;
  }
  bool is_name(const char* name) const {
    return cur().type == TokenType::kName && cur().value == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe_token(cur()));
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail("expected a name, got " + describe_token(cur()));
    std::string name = cur().value;
    next();
    return name;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) {
      fail("expected end of statement block, got " + describe_token(cur()));
    }
    next();
  }

  // ---- statements ----

  // Parses until one of end_tags opens a block; leaves the tag name in end_tag and the position
  // just after the tag's name.
  Body parse_body(std::initializer_list<const char*> end_tags, std::string& end_tag) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case TokenType::kEof:
          if (end_tags.size() > 0) {
            fail(std::string("unexpected end of template, expected '") + *end_tags.begin() + "'");
          }
          return body;
        case TokenType::kText: {
          auto s = make_stmt(StmtKind::kText, t.line);
          s->text = t.value;
          body.push_back(std::move(s));
          next();
          break;
        }
        case TokenType::kVarBegin: {
          auto s = make_stmt(StmtKind::kPrint, t.line);
          next();
          s->expr = parse_tuple(false);
          if (cur().type != TokenType::kVarEnd) {
            fail("unexpected " + describe_token(cur()) + " in print statement");
          }
          next();
          body.push_back(std::move(s));
          break;
        }
        case TokenType::kBlockBegin: {
          next();
          if (cur().type != TokenType::kName) fail("expected a statement name");
          for (const char* end : end_tags) {
            if (cur().value == end) {
              end_tag = end;
              next();
              return body;
            }
          }
          body.push_back(parse_statement());
          break;
        }
        default:
          fail("unexpected " + describe_token(t));
      }
    }
  }

  std::unique_ptr<Stmt> parse_statement() {
    const std::string tag = cur().value;
    const int line = cur().line;
    next();
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "call") return parse_call_block(line);
    if (tag == "filter") return parse_filter_block(line);
    if (tag == "generation") return parse_simple_block(line, "endgeneration");
    if (tag == "with") return parse_with(line);
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends") {
      // Hugging Face renders from a string with no loader, so Jinja2 fails these at render.
      pos_--;
      fail("'" + tag + "' is not supported: no loader for this environment specified");
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
      expect_block_end();
      return make_stmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
    }
    pos_--;  // point the error at the tag
    fail("encountered unknown tag '" + tag + "'");
  }

  std::unique_ptr<Stmt> parse_if(int line) {
    auto s = make_stmt(StmtKind::kIf, line);
    while (true) {
      s->conditions.push_back(parse_tuple(false, false));
      expect_block_end();
      std::string end;
      s->bodies.push_back(parse_body({"elif", "else", "endif"}, end));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, end);
      }
      expect_block_end();
      return s;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    do {
      if (paren && is_op(")")) break;
      names.push_back(expect_name());
    } while (skip_op(","));
    if (paren) expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> parse_for(int line) {
    auto s = make_stmt(StmtKind::kFor, line);
    s->targets = parse_targets();
    if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe_token(cur()));
    s->expr = parse_tuple(false, false);
    if (skip_name("if")) s->condition = parse_expression();
    s->recursive = skip_name("recursive");
    expect_block_end();
    std::string end;
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"}, end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, end);
    }
    expect_block_end();
    return s;
  }

  // {% with a = 1, b = 2 %}...{% endwith %}: values are evaluated in the enclosing scope.
  std::unique_ptr<Stmt> parse_with(int line) {
    auto s = make_stmt(StmtKind::kWith, line);
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->params.empty()) expect_op(",");
      s->params.push_back(expect_name());
      expect_op("=");
      s->defaults.push_back(parse_expression());
    }
    expect_block_end();
    std::string end;
    s->body = parse_body({"endwith"}, end);
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_set(int line) {
    // Targets: `ns.attr` (a namespace attribute) or names, possibly a tuple.
    std::vector<std::string> targets;
    std::string attr;
    if (cur().type == TokenType::kName && peek().type == TokenType::kOperator &&
        peek().value == ".") {
      targets.push_back(expect_name());
      next();
      attr = expect_name();
    } else {
      targets = parse_targets();
    }
    if (skip_op("=")) {  // {% set x = expr %}
      auto s = make_stmt(StmtKind::kSet, line);
      s->targets = std::move(targets);
      s->attr = std::move(attr);
      s->expr = parse_tuple(false);
      expect_block_end();
      return s;
    }
    // {% set x %}...{% endset %}, optionally filtered.
    if (targets.size() != 1) fail("block set needs exactly one target");
    auto s = make_stmt(StmtKind::kSetBlock, line);
    s->targets = std::move(targets);
    s->attr = std::move(attr);
    if (is_op("|")) s->filter = parse_filters(nullptr);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endset"}, end);
    expect_block_end();
    return s;
  }

  void parse_params(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      s.params.push_back(expect_name());
      s.defaults.push_back(skip_op("=") ? parse_expression() : nullptr);
    }
    next();
  }

  std::unique_ptr<Stmt> parse_macro(int line) {
    auto s = make_stmt(StmtKind::kMacro, line);
    s->name = expect_name();
    parse_params(*s);
    expect_block_end();
    std::string end;
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"}, end);
    loop_depth_ = saved_loops;
    skip_name(s->name.c_str());
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_call_block(int line) {
    auto s = make_stmt(StmtKind::kCallBlock, line);
    if (is_op("(")) parse_params(*s);
    s->expr = parse_expression();
    if (s->expr->kind != ExprKind::kCall) fail("expected a call in call block");
    expect_block_end();
    std::string end;
    s->body = parse_body({"endcall"}, end);
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_filter_block(int line) {
    auto s = make_stmt(StmtKind::kFilterBlock, line);
    s->filter = parse_filters(nullptr, /*leading_pipe=*/false);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endfilter"}, end);
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_simple_block(int line, const char* end_tag) {
    auto s = make_stmt(StmtKind::kScope, line);
    expect_block_end();
    std::string end;
    s->body = parse_body({end_tag}, end);
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  // A comma-separated list is a tuple: "{{ a, b }}", "set a, b = 1, 2", "(1, 2)".
  ExprPtr parse_tuple(bool explicit_parens, bool with_condexpr = true) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool saw_comma = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        saw_comma = true;
      }
      if (is_tuple_end()) break;
      items.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    if (!saw_comma) {
      if (items.size() == 1) return std::move(items[0]);
      if (!explicit_parens) fail("expected an expression, got " + describe_token(cur()));
    }
    auto e = make_expr(ExprKind::kTuple, line);
    e->items = std::move(items);
    return e;
  }

  bool is_tuple_end() const {
    const Token& t = cur();
    if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd ||
        t.type == TokenType::kEof) {
      return true;
    }
    return t.type == TokenType::kOperator && t.value == ")";
  }

  ExprPtr parse_expression() {
    DepthGuard guard(*this);
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      next();
      auto e = make_expr(ExprKind::kCondExpr, line);
      ExprPtr condition = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression() : nullptr;
      e->items.push_back(std::move(expr));
      e->items.push_back(std::move(condition));
      e->items.push_back(std::move(otherwise));
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
    auto e = make_expr(ExprKind::kBinary, line);
    e->name = op;
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return e;
  }

  // One left-associative level: operand (op operand)*, `is_level_op` telling whether the current
  // token is one of the level's operators (a name such as "or" or a symbol such as "+").
  template <typename IsLevelOp>
  ExprPtr left_assoc(ExprPtr (Parser::*operand)(), IsLevelOp is_level_op) {
    ExprPtr left = (this->*operand)();
    while (is_level_op()) {
      const std::string op = cur().value;
      const int line = cur().line;
      next();
      left = binary(op, std::move(left), (this->*operand)(), line);
    }
    return left;
  }

  ExprPtr parse_or() {
    return left_assoc(&Parser::parse_and, [&] { return is_name("or"); });
  }
  ExprPtr parse_and() {
    return left_assoc(&Parser::parse_not, [&] { return is_name("and"); });
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = make_expr(ExprKind::kUnary, cur().line);
      next();
      e->name = "not";
      e->object = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr e;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOperator &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == ">" ||
           cur().value == "<=" || cur().value == ">=")) {
        op = cur().value;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!e) {
        e = make_expr(ExprKind::kCompare, line);
        e->object = std::move(first);
      }
      e->ops.push_back(op);
      e->items.push_back(parse_math1());
    }
    return e ? std::move(e) : std::move(first);
  }

  ExprPtr parse_math1() {
    return left_assoc(&Parser::parse_concat, [&] { return is_op("+") || is_op("-"); });
  }
  ExprPtr parse_concat() {
    return left_assoc(&Parser::parse_math2, [&] { return is_op("~"); });
  }
  ExprPtr parse_math2() {
    return left_assoc(&Parser::parse_pow,
                      [&] { return is_op("*") || is_op("/") || is_op("//") || is_op("%"); });
  }
  ExprPtr parse_pow() {
    return left_assoc(&Parser::parse_power_operand, [&] { return is_op("**"); });
  }
  ExprPtr parse_power_operand() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = make_expr(ExprKind::kUnary, cur().line);
      e->name = cur().value;
      next();
      e->object = parse_unary(false);
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    switch (t.type) {
      case TokenType::kName: {
        const std::string& n = t.value;
        auto lit = make_expr(ExprKind::kLiteral, line);
        if (n == "true" || n == "True") {
          lit->literal = Value(true);
        } else if (n == "false" || n == "False") {
          lit->literal = Value(false);
        } else if (n == "none" || n == "None") {
          lit->literal = Value::none();
        } else {
          auto e = make_expr(ExprKind::kName, line);
          e->name = n;
          next();
          return e;
        }
        next();
        return lit;
      }
      case TokenType::kString: {
        std::string s;
        while (cur().type == TokenType::kString) {
          s += cur().value;
          next();
        }
        auto lit = make_expr(ExprKind::kLiteral, line);
        lit->literal = Value(std::move(s));
        return lit;
      }
      case TokenType::kInt: {
        auto lit = make_expr(ExprKind::kLiteral, line);
        int64_t v = 0;
        auto res = std::from_chars(t.value.data(), t.value.data() + t.value.size(), v);
        if (res.ec != std::errc()) {
          lit->literal = Value(parse_double(t.value));
        } else {
          lit->literal = Value(v);
        }
        next();
        return lit;
      }
      case TokenType::kFloat: {
        auto lit = make_expr(ExprKind::kLiteral, line);
        lit->literal = Value(parse_double(t.value));
        next();
        return lit;
      }
      case TokenType::kOperator:
        if (t.value == "(") {
          next();
          ExprPtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (t.value == "[") {
          next();
          auto e = make_expr(ExprKind::kList, line);
          while (!is_op("]")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("]")) break;
            e->items.push_back(parse_expression());
          }
          next();
          return e;
        }
        if (t.value == "{") {
          next();
          auto e = make_expr(ExprKind::kDict, line);
          while (!is_op("}")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("}")) break;
            e->keys.push_back(parse_expression());
            expect_op(":");
            e->items.push_back(parse_expression());
          }
          next();
          return e;
        }
        break;
      default:
        break;
    }
    fail("unexpected " + describe_token(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      const int line = cur().line;
      if (is_op(".")) {
        next();
        auto e = make_expr(ExprKind::kGetAttr, line);
        if (cur().type == TokenType::kInt) {  // x.0 is x[0]
          e->kind = ExprKind::kGetItem;
          auto idx = make_expr(ExprKind::kLiteral, line);
          const std::optional<int64_t> index = parse_int(cur().value);
          if (!index) fail("integer index out of range: " + cur().value);
          idx->literal = Value(*index);
          next();
          e->items.push_back(std::move(idx));
        } else {
          e->name = expect_name();
        }
        e->object = std::move(node);
        node = std::move(e);
      } else if (is_op("[")) {
        next();
        node = parse_subscript(std::move(node), line);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object, int line) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!is_op("]")) {
      if (is_op(":")) {
        next();
        is_slice = true;
        if (++part > 2) fail("too many ':' in slice");
        continue;
      }
      if (parts[part]) fail("unexpected " + describe_token(cur()) + " in subscript");
      parts[part] = parse_expression();
    }
    next();
    auto e = make_expr(is_slice ? ExprKind::kSlice : ExprKind::kGetItem, line);
    e->object = std::move(object);
    if (is_slice) {
      for (auto& p : parts) e->items.push_back(std::move(p));
    } else {
      if (!parts[0]) fail("empty subscript");
      e->items.push_back(std::move(parts[0]));
    }
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator &&
          peek().value == "=") {
        std::string key = cur().value;
        next();
        next();
        e.keywords.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.keywords.empty()) fail("positional argument after keyword argument");
        e.items.push_back(parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    DepthGuard guard(*this);
    auto e = make_expr(ExprKind::kCall, cur().line);
    e->object = std::move(callee);
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filters(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  // One or more "| name(args)" applied to node (null for filter blocks and block sets).
  ExprPtr parse_filters(ExprPtr node, bool leading_pipe = true) {
    DepthGuard guard(*this);
    bool first = true;
    while ((first && !leading_pipe) || is_op("|")) {
      if (!(first && !leading_pipe)) next();
      first = false;
      auto e = make_expr(ExprKind::kFilter, cur().line);
      e->name = expect_name();
      while (skip_op(".")) {
        e->name += '.';
        e->name += expect_name();
      }
      if (is_op("(")) parse_call_args(*e);
      e->object = std::move(node);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    DepthGuard guard(*this);
    auto e = make_expr(ExprKind::kTest, cur().line);
    next();  // is
    e->negated = skip_name("not");
    e->name = expect_name();
    while (skip_op(".")) e->name += "." + expect_name();
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
                t.type == TokenType::kInt || t.type == TokenType::kFloat || is_op("[") ||
                is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with is");
      e->items.push_back(parse_postfix(parse_primary()));
    }
    e->object = std::move(node);
    return e;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source, const LexerOptions& options) {
  return Parser(tokenize(source, options)).parse();
}

}  // namespace pagoda::tmpl
