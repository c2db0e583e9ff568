#pragma once
// The syntax tree of a parsed template. Nodes are immutable after parsing, so one tree can be
// rendered by many threads at once; the evaluator switches on each node's kind.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace pagoda::tmpl {

enum class ExprKind {
  kLiteral,   // literal: a constant
  kName,      // name
  kList,      // items
  kTuple,     // items
  kDict,      // keys, items
  kGetAttr,   // object, name
  kGetItem,   // object, items[0] = index
  kSlice,     // object, items = start, stop, step (null where absent)
  kCall,      // object = callee, items = positional, keywords
  kFilter,    // object (null inside {% filter %}), name, items, keywords
  kTest,      // object, name, items, negated
  kUnary,     // name = "-", "+" or "not"; object
  kBinary,    // name = operator ("and", "or", "+", "~", ...); items[0], items[1]
  kCompare,   // object = first; ops and items are the rest
  kCondExpr,  // items = then, condition, else (else may be null)
};

/// One expression node; which fields mean what depends on kind (see ExprKind).
struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::unique_ptr<Expr> object;
  std::vector<std::unique_ptr<Expr>> items;
  std::vector<std::unique_ptr<Expr>> keys;  // dict literal keys
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> keywords;
  std::vector<std::string> ops;  // comparison operators
  bool negated = false;
};

using ExprPtr = std::unique_ptr<Expr>;
struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind {
  kText,         // text
  kPrint,        // expr
  kIf,           // conditions[i] guards bodies[i]; else_body
  kFor,          // targets, expr = iterable, condition = inline filter, body, else_body, recursive
  kSet,          // targets (or attribute target: targets[0] . attr), expr
  kSetBlock,     // targets[0] (or targets[0] . attr), filter (kFilter chain, null innermost), body
  kWith,         // params = names, defaults = their values, body (a scope of its own)
  kMacro,        // name, params, defaults, body
  kCallBlock,    // expr = call, params/defaults = caller's, body
  kFilterBlock,  // filter, body
  kBreak,
  kContinue,
  kScope,  // body rendered in place ({% generation %})
};

/// One statement node; which fields mean what depends on kind (see StmtKind).
struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  ExprPtr filter;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;  // {% set ns.attr = ... %}
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // parallel to params; null where no default
  bool recursive = false;         // {% for ... recursive %}: the body may call loop(items)
};

}  // namespace pagoda::tmpl
