// Chat templates' text to statements: the template is cut into text and tags with transformers'
// whitespace rules (trim_blocks, lstrip_blocks, and `-` inside a tag), then each tag's contents are
// tokenized and parsed by recursive descent with Jinja's precedence.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>
#include <string_view>

#include "common/error.h"
#include "model/jinja/ast.h"

namespace mosaic::jinja {
namespace {

struct Piece {
  enum class Kind { Text, Expr, Block } kind;
  std::string content;  // text, or the tag's inside without its delimiters and markers
  int line = 0;
};

bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// The line of `pos`, counted on from the last position asked about (asked in increasing order).
struct Lines {
  const std::string& s;
  std::size_t at = 0;
  int line = 1;
  int of(std::size_t pos) {
    for (; at < pos && at < s.size(); ++at) line += s[at] == '\n';
    return line;
  }
};

// Where the tag that opens at `from` (its inside) closes with `close`, skipping quoted strings.
std::size_t find_close(const std::string& s, std::size_t from, std::string_view close) {
  char quote = 0;
  for (std::size_t i = from; i < s.size(); ++i) {
    if (quote) {
      if (s[i] == '\\') ++i;
      else if (s[i] == quote) quote = 0;
    } else if (s[i] == '\'' || s[i] == '"') {
      quote = s[i];
    } else if (s.compare(i, close.size(), close) == 0) {
      return i;
    }
  }
  return std::string::npos;
}

std::vector<Piece> cut(const std::string& s, const std::string& source) {
  std::vector<Piece> out;
  Lines lines{s};
  std::size_t pos = 0;
  bool strip_next = false, newline_next = false;  // after `-…}` all leading blanks; after `%}` one newline
  auto add_text = [&](std::string text, int line) {
    if (strip_next) {
      std::size_t i = 0;
      while (i < text.size() && blank(text[i])) ++i;
      text.erase(0, i);
    } else if (newline_next) {
      if (text.starts_with("\r\n")) text.erase(0, 2);
      else if (text.starts_with("\n")) text.erase(0, 1);
    }
    strip_next = newline_next = false;
    out.push_back({Piece::Kind::Text, std::move(text), line});
  };
  while (pos <= s.size()) {
    std::size_t open = s.find('{', pos);
    while (open != std::string::npos && open + 1 < s.size() && s[open + 1] != '{' && s[open + 1] != '%' && s[open + 1] != '#')
      open = s.find('{', open + 1);
    if (open == std::string::npos || open + 1 >= s.size()) {
      add_text(s.substr(pos), lines.of(pos));
      break;
    }
    const char type = s[open + 1];
    const int text_line = lines.of(pos), line = lines.of(open);
    std::size_t inner = open + 2;
    const bool trim_left = inner < s.size() && s[inner] == '-';
    const bool keep_left = inner < s.size() && s[inner] == '+';
    if (trim_left || keep_left) ++inner;
    const std::string_view close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    const std::size_t end = type == '#' ? s.find("#}", inner) : find_close(s, inner, close);
    if (end == std::string::npos)
      throw FormatError(source, "chat_template", "line " + std::to_string(line) + ": '{" + std::string(1, type) + "' is never closed with '" +
                                                     std::string(close) + "'");
    const bool trim_right = end > inner && s[end - 1] == '-';
    std::string text = s.substr(pos, open - pos);
    const bool block = type != '{';
    if (trim_left) {
      while (!text.empty() && blank(text.back())) text.pop_back();
    } else if (block && !keep_left) {  // lstrip_blocks: a block tag alone after a line's indentation
      std::size_t i = text.size();
      while (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t')) --i;
      if (i > 0 ? text[i - 1] == '\n' : pos == 0) text.erase(i);  // only indentation since the line began
    }
    add_text(std::move(text), text_line);
    if (type != '#') {
      std::string content = s.substr(inner, (trim_right ? end - 1 : end) - inner);
      out.push_back({type == '{' ? Piece::Kind::Expr : Piece::Kind::Block, std::move(content), line});
    }
    strip_next = trim_right;
    newline_next = !trim_right && block;  // trim_blocks
    pos = end + 2;
  }
  return out;
}

// ---- tokens of a tag's inside

struct Token {
  enum class Kind { Name, Number, String, Op, End } kind;
  std::string text;
  Value value;  // Number, String
};

std::vector<Token> tokenize(const std::string& s, const std::string& source, int line) {
  std::vector<Token> out;
  auto fail = [&](const std::string& what) -> FormatError {
    return FormatError(source, "chat_template", "line " + std::to_string(line) + ": " + what);
  };
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (blank(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::Name, s.substr(i, j - i), {}});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      bool real = false;
      auto digits_from = [&](std::size_t k) {
        while (k < s.size() && (std::isdigit(static_cast<unsigned char>(s[k])) || s[k] == '_')) ++k;
        return k;
      };
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        real = true;
        j = digits_from(j + 1);
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {  // 1e16, 2.5e-3
        std::size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          real = true;
          j = digits_from(k);
        }
      }
      std::string digits;
      for (std::size_t k = i; k < j; ++k)
        if (s[k] != '_') digits += s[k];
      Value number;
      if (real) {
        double d = 0;
        const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), d);
        if (r.ec != std::errc()) throw fail("the number " + digits + " is out of range");
        number = d;
      } else {
        std::int64_t n = 0;
        const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), n);
        if (r.ec != std::errc()) throw fail("the number " + digits + " is out of range");
        number = n;
      }
      out.push_back({Token::Kind::Number, digits, number});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      std::size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case 'r': v += '\r'; break;
          case '0': v += '\0'; break;
          case '\\': v += '\\'; break;
          case '\'': v += '\''; break;
          case '"': v += '"'; break;
          case '\n': break;  // a line continued
          default: v += '\\', v += e;  // as Python keeps unknown escapes
        }
      }
      if (j >= s.size()) throw fail("a string is never closed");
      out.push_back({Token::Kind::String, {}, Value(v)});
      i = j + 1;
    } else {
      static const char* ops[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%", "~",
                                  "(",  ")",  "[",  "]",  "{",  "}",  ",", ".", ":", "|", "="};
      std::string op;
      for (const char* o : ops)
        if (s.compare(i, std::char_traits<char>::length(o), o) == 0) {
          op = o;
          break;
        }
      if (op.empty()) throw fail(std::string("unexpected character '") + c + "'");
      out.push_back({Token::Kind::Op, op, {}});
      i += op.size();
    }
  }
  out.push_back({Token::Kind::End, "", {}});
  return out;
}

// ---- expressions

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, const std::string& source, int line) : t_(std::move(tokens)), source_(source), line_(line) {}

  FormatError fail(const std::string& what) const {
    return FormatError(source_, "chat_template", "line " + std::to_string(line_) + ": " + what);
  }
  const Token& peek(std::size_t ahead = 0) const { return t_[std::min(at_ + ahead, t_.size() - 1)]; }
  bool at_end() const { return peek().kind == Token::Kind::End; }
  bool is_op(const char* op, std::size_t ahead = 0) const { return peek(ahead).kind == Token::Kind::Op && peek(ahead).text == op; }
  bool is_name(const char* name, std::size_t ahead = 0) const { return peek(ahead).kind == Token::Kind::Name && peek(ahead).text == name; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    ++at_;
    return true;
  }
  bool accept_name(const char* name) {
    if (!is_name(name)) return false;
    ++at_;
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) throw fail(std::string("expected '") + op + "', found " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().kind != Token::Kind::Name) throw fail("expected a name, found " + describe(peek()));
    return t_[at_++].text;
  }
  void expect_end() {
    if (!at_end()) throw fail("unexpected " + describe(peek()));
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::End: return "the end of the tag";
      case Token::Kind::String: return "a string";
      case Token::Kind::Number: return "'" + t.text + "'";
      default: return "'" + t.text + "'";
    }
  }

  // A node's depth from its children's; chains (a + b + …, a.b.c…, x | f | g …) are built in
  // loops, so the recursion guard does not see them.
  ExprPtr deepen(ExprPtr e) const {
    int d = 0;
    for (const ExprPtr* c : {&e->a, &e->b, &e->c, &e->d})
      if (*c) d = std::max(d, (*c)->depth);
    for (const auto& x : e->items) d = std::max(d, x->depth);
    for (const auto& x : e->args.positional) d = std::max(d, x->depth);
    for (const auto& [n, x] : e->args.named) d = std::max(d, x->depth);
    e->depth = d + 1;
    if (e->depth > 128) throw fail("an expression nested deeper than 128");
    return e;
  }

  ExprPtr make(Expr::Kind k) const {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }

  // Nesting deeper than any template needs is refused before it can exhaust the stack.
  struct Depth {
    Depth(ExprParser& p) : p_(p) {
      if (++p_.depth_ > 64) throw p_.fail("expressions nested deeper than 64");
    }
    ~Depth() { --p_.depth_; }
    ExprParser& p_;
  };

  ExprPtr expression() {
    Depth guard(*this);
    ExprPtr e = or_expr();
    if (accept_name("if")) {
      auto c = make(Expr::Kind::Conditional);
      c->a = or_expr();  // the condition
      c->b = std::move(e);
      if (accept_name("else")) c->c = expression();
      return c;
    }
    return e;
  }

  // A for loop's targets end at `in`, so they are names, not expressions.
  std::vector<std::string> targets() {
    std::vector<std::string> out;
    const bool paren = accept_op("(");
    do out.push_back(expect_name());
    while (accept_op(","));
    if (paren) expect_op(")");
    return out;
  }

  // The iterable of a for loop: an expression without a conditional (its `if` filters the loop).
  ExprPtr iterable() { return or_expr(); }

 private:
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::Binary);
    e->name = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return deepen(std::move(e));
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (accept_name("or")) e = binary("or", std::move(e), and_expr());
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (accept_name("and")) e = binary("and", std::move(e), not_expr());
    return e;
  }
  ExprPtr not_expr() {
    Depth guard(*this);
    if (accept_name("not")) {
      auto e = make(Expr::Kind::Not);
      e->a = not_expr();
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = concat();
    for (;;) {
      std::string op;
      for (const char* o : {"==", "!=", "<=", ">=", "<", ">"})
        if (is_op(o)) op = o;
      if (!op.empty()) {
        ++at_;
      } else if (is_name("in")) {
        ++at_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        at_ += 2;
        op = "not in";
      } else {
        return e;
      }
      e = binary(op, std::move(e), concat());
    }
  }
  ExprPtr concat() {
    ExprPtr e = sum();
    while (accept_op("~")) e = binary("~", std::move(e), sum());
    return e;
  }
  ExprPtr sum() {
    ExprPtr e = product();
    while (is_op("+") || is_op("-")) {
      const std::string op = t_[at_++].text;
      e = binary(op, std::move(e), product());
    }
    return e;
  }
  ExprPtr product() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = t_[at_++].text;
      e = binary(op, std::move(e), power());
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary();
    while (accept_op("**")) e = binary("**", std::move(e), unary());
    return e;
  }
  ExprPtr unary() {
    Depth guard(*this);
    if (accept_op("-")) {
      auto e = make(Expr::Kind::Negate);
      e->a = unary();
      return filters(std::move(e));
    }
    if (accept_op("+")) return unary();
    return filters(postfix(primary()));
  }

  Args arguments() {  // after '(' up to and including ')'
    Args args;
    while (!accept_op(")")) {
      if (peek().kind == Token::Kind::Name && is_op("=", 1)) {
        std::string name = expect_name();
        ++at_;
        args.named.emplace_back(std::move(name), expression());
      } else {
        if (!args.named.empty()) throw fail("a positional argument after a named one");
        args.positional.push_back(expression());
      }
      if (!is_op(")")) expect_op(",");
    }
    return args;
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (accept_op(".")) {
        auto a = make(Expr::Kind::Attr);
        a->a = std::move(e);
        a->name = peek().kind == Token::Kind::Number ? t_[at_++].text : expect_name();
        e = deepen(std::move(a));
      } else if (accept_op("[")) {
        ExprPtr start, stop, step;
        bool slice = false;
        if (!is_op(":")) start = expression();
        if (accept_op(":")) {
          slice = true;
          if (!is_op(":") && !is_op("]")) stop = expression();
          if (accept_op(":") && !is_op("]")) step = expression();
        }
        expect_op("]");
        auto x = make(slice ? Expr::Kind::Slice : Expr::Kind::Index);
        x->a = std::move(e);
        x->b = std::move(start);
        x->c = std::move(stop);
        x->d = std::move(step);
        if (!slice && !x->b) throw fail("an empty subscript []");
        e = deepen(std::move(x));
      } else if (accept_op("(")) {
        auto c = make(Expr::Kind::Call);
        c->a = std::move(e);
        c->args = arguments();
        e = deepen(std::move(c));
      } else {
        return e;
      }
    }
  }

  ExprPtr filters(ExprPtr e) {
    for (;;) {
      if (accept_op("|")) {
        auto f = make(Expr::Kind::Filter);
        f->a = std::move(e);
        f->name = expect_name();
        if (accept_op("(")) f->args = arguments();
        e = deepen(std::move(f));
      } else if (accept_name("is")) {
        auto t = make(Expr::Kind::Test);
        t->a = std::move(e);
        t->negated = accept_name("not");
        t->name = expect_name();
        if (accept_op("(")) {
          t->args = arguments();
        } else if (peek().kind == Token::Kind::Number || peek().kind == Token::Kind::String ||
                   (peek().kind == Token::Kind::Name && !keyword(peek().text))) {
          t->args.positional.push_back(postfix(primary()));  // `x is divisibleby 3`
        }
        e = deepen(std::move(t));
      } else {
        return e;
      }
    }
  }

  static bool keyword(const std::string& w) {
    static const std::set<std::string> k{"and", "or", "not", "if", "else", "in", "is", "recursive"};
    return k.contains(w);
  }

  ExprPtr primary() {
    const Token& t = peek();
    if (t.kind == Token::Kind::String) {
      std::string v;
      while (peek().kind == Token::Kind::String) v += t_[at_++].value.get<std::string>();  // 'a' 'b' is 'ab'
      auto e = make(Expr::Kind::Literal);
      e->value = v;
      return e;
    }
    if (t.kind == Token::Kind::Number) {
      auto e = make(Expr::Kind::Literal);
      e->value = t_[at_++].value;
      return e;
    }
    if (t.kind == Token::Kind::Name) {
      const std::string w = t_[at_++].text;
      auto e = make(Expr::Kind::Literal);
      if (w == "true" || w == "True") e->value = true;
      else if (w == "false" || w == "False") e->value = false;
      else if (w == "none" || w == "None") e->value = nullptr;
      else {
        if (keyword(w)) throw fail("unexpected '" + w + "'");
        e = make(Expr::Kind::Name);
        e->name = w;
      }
      return e;
    }
    if (accept_op("(")) {  // a parenthesized expression, or a tuple (read as a list)
      if (accept_op(")")) return make(Expr::Kind::List);
      ExprPtr first = expression();
      if (accept_op(")")) return first;
      auto l = make(Expr::Kind::List);
      l->items.push_back(std::move(first));
      while (accept_op(",")) {
        if (is_op(")")) break;
        l->items.push_back(expression());
      }
      expect_op(")");
      return l;
    }
    if (accept_op("[")) {
      auto l = make(Expr::Kind::List);
      while (!accept_op("]")) {
        l->items.push_back(expression());
        if (!is_op("]")) expect_op(",");
      }
      return l;
    }
    if (accept_op("{")) {
      auto d = make(Expr::Kind::Dict);
      while (!accept_op("}")) {
        d->items.push_back(expression());
        expect_op(":");
        d->items.push_back(expression());
        if (!is_op("}")) expect_op(",");
      }
      return d;
    }
    throw fail("expected a value, found " + describe(t));
  }

  std::vector<Token> t_;
  std::size_t at_ = 0;
  const std::string& source_;
  int line_;
  int depth_ = 0;
};

// ---- statements

class StmtParser {
 public:
  StmtParser(std::vector<Piece> pieces, const std::string& source) : p_(std::move(pieces)), source_(source) {}

  Body all() {
    std::string ended;
    Body b = body({}, ended);
    return b;
  }

 private:
  FormatError fail(int line, const std::string& what) const {
    return FormatError(source_, "chat_template", "line " + std::to_string(line) + ": " + what);
  }

  std::unique_ptr<Stmt> make(Stmt::Kind k, int line) const {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = line;
    return s;
  }

  // Statements up to a block tag whose first word is in `until` (consumed; its parser returned
  // through `tail` and its word through `ended`). At the top level `until` is empty.
  Body body(const std::set<std::string>& until, std::string& ended, std::unique_ptr<ExprParser>* tail = nullptr) {
    if (++depth_ > 64) throw fail(at_ < p_.size() ? p_[at_].line : 0, "blocks nested deeper than 64");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    Body out;
    while (at_ < p_.size()) {
      const Piece& piece = p_[at_++];
      if (piece.kind == Piece::Kind::Text) {
        if (piece.content.empty()) continue;
        auto s = make(Stmt::Kind::Text, piece.line);
        s->text = piece.content;
        out.push_back(std::move(s));
        continue;
      }
      auto x = std::make_unique<ExprParser>(tokenize(piece.content, source_, piece.line), source_, piece.line);
      if (piece.kind == Piece::Kind::Expr) {
        auto s = make(Stmt::Kind::Output, piece.line);
        s->expr = x->expression();
        x->expect_end();
        out.push_back(std::move(s));
        continue;
      }
      const std::string word = x->expect_name();
      if (until.contains(word)) {
        ended = word;
        if (tail) *tail = std::move(x);
        else x->expect_end();
        return out;
      }
      out.push_back(statement(word, *x, piece.line));
    }
    if (!until.empty()) {
      std::string names;
      for (const auto& u : until) names += (names.empty() ? "'" : " or '") + u + "'";
      throw fail(p_.empty() ? 0 : p_.back().line, "the template ends where " + names + " was expected");
    }
    return out;
  }

  std::unique_ptr<Stmt> statement(const std::string& word, ExprParser& x, int line) {
    std::string ended;
    if (word == "if") {
      auto s = make(Stmt::Kind::If, line);
      s->conditions.push_back(x.expression());
      x.expect_end();
      for (;;) {
        std::unique_ptr<ExprParser> tail;
        s->branches.push_back(body({"elif", "else", "endif"}, ended, &tail));
        if (ended == "elif") {
          s->conditions.push_back(tail->expression());
          tail->expect_end();
          continue;
        }
        tail->expect_end();
        if (ended == "else") s->else_body = body({"endif"}, ended);
        return s;
      }
    }
    if (word == "for") {
      auto s = make(Stmt::Kind::For, line);
      s->targets = x.targets();
      if (!x.accept_name("in")) throw fail(line, "expected 'in' in the for loop");
      s->expr = x.iterable();
      if (x.accept_name("if")) s->filter = x.expression();
      if (x.accept_name("recursive")) throw fail(line, "recursive loops are not supported");
      x.expect_end();
      std::unique_ptr<ExprParser> tail;
      s->body = body({"else", "endfor"}, ended, &tail);
      tail->expect_end();
      if (ended == "else") s->else_body = body({"endfor"}, ended);
      return s;
    }
    if (word == "set") {
      std::vector<std::string> target{x.expect_name()};
      if (x.accept_op(".")) target.push_back(x.expect_name());
      if (x.accept_op("=")) {
        auto s = make(Stmt::Kind::Set, line);
        s->targets = std::move(target);
        s->expr = x.expression();
        x.expect_end();
        return s;
      }
      x.expect_end();
      auto s = make(Stmt::Kind::SetBlock, line);
      s->targets = std::move(target);
      s->body = body({"endset"}, ended);
      return s;
    }
    if (word == "macro") {
      auto s = make(Stmt::Kind::Macro, line);
      s->name = x.expect_name();
      x.expect_op("(");
      while (!x.accept_op(")")) {
        std::string param = x.expect_name();
        ExprPtr def;
        if (x.accept_op("=")) def = x.expression();
        s->params.emplace_back(std::move(param), std::move(def));
        if (!x.is_op(")")) x.expect_op(",");
      }
      x.expect_end();
      s->body = body({"endmacro"}, ended);
      return s;
    }
    if (word == "break" || word == "continue") {
      x.expect_end();
      return make(word == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
    }
    if (word == "generation") {  // transformers' assistant-mask marker: its body renders as is
      x.expect_end();
      auto s = make(Stmt::Kind::If, line);
      auto yes = x.make(Expr::Kind::Literal);
      yes->value = true;
      s->conditions.push_back(std::move(yes));
      s->branches.push_back(body({"endgeneration"}, ended));
      return s;
    }
    throw fail(line, "'{% " + word + " %}' is not supported here (chat templates use if, for, set, macro, break, continue)");
  }

  std::vector<Piece> p_;
  std::size_t at_ = 0;
  const std::string& source_;
  int depth_ = 0;
};

}  // namespace

Body parse(const std::string& text, const std::string& source) {
  // Jinja reads every line ending as \n, and drops one newline at the very end
  // (keep_trailing_newline is off in transformers).
  std::string body;
  body.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      body += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      body += text[i];
    }
  }
  if (body.ends_with('\n')) body.pop_back();
  return StmtParser(cut(body, source), source).all();
}

}  // namespace mosaic::jinja
