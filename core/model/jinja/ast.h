#pragma once
// The parsed form of a chat template: expressions and statements of the Jinja subset that
// chat_template.h lists. Private to model/jinja and chat_template.cpp.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mosaic::jinja {

using Value = nlohmann::ordered_json;  // Jinja's values; undefined is a discarded json

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> named;
};

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    Attr,       // a.name
    Index,      // a[b]
    Slice,      // a[b:c:d], any of b, c, d absent
    Call,       // a(args)
    Filter,     // a | name(args)
    Test,       // a is [not] name(args)
    Not,        // not a
    Negate,     // -a
    Binary,     // a op b
    Conditional,  // b if a else c
    List,       // [items]
    Dict,       // {items[0]: items[1], …}
  };
  Kind kind;
  int line = 0;
  int depth = 1;     // of the tree below (bounded when parsing: destroying and evaluating recurse)
  Value value;       // Literal
  std::string name;  // Name, Attr, Filter, Test; Binary: the operator
  bool negated = false;  // Test
  ExprPtr a, b, c, d;
  Args args;                  // Call, Filter, Test
  std::vector<ExprPtr> items;  // List; Dict: key, value, key, value, …
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue };
  Kind kind;
  int line = 0;
  std::string text;  // Text
  ExprPtr expr;      // Output; For: the iterable; Set: the value
  // If: one condition per branch, `else_body` when none holds.
  std::vector<ExprPtr> conditions;
  std::vector<Body> branches;
  Body body, else_body;  // For, SetBlock, Macro: body; For: else when it iterated nothing
  std::vector<std::string> targets;  // For: the loop variables; Set/SetBlock: {name} or {namespace, attribute}
  ExprPtr filter;                    // For: `if` after the iterable
  std::string name;                  // Macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro: name, default (may be null)
};

// Throws mosaic::FormatError naming `source` and the line.
Body parse(const std::string& text, const std::string& source);

}  // namespace mosaic::jinja
