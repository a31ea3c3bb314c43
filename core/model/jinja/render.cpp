// Jinja's semantics as far as chat templates lean on them: Python truthiness and operators, loop
// variables, scoping (a loop's body has its own; namespace() objects carry values out), and the
// filters, tests, methods and globals the common templates call.
#include "model/jinja/render.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>

#include "common/error.h"
#include "model/jinja/python_text.h"

namespace mosaic::jinja {
namespace {

const char* const kNamespace = "\x01namespace";  // the key that marks a namespace() object

Value undefined() { return Value(Value::value_t::discarded); }
bool is_undefined(const Value& v) { return v.is_discarded(); }
bool is_namespace(const Value& v) { return v.is_object() && v.contains(kNamespace); }

bool truthy(const Value& v) {
  switch (v.type()) {
    case Value::value_t::discarded:
    case Value::value_t::null: return false;
    case Value::value_t::boolean: return v.get<bool>();
    case Value::value_t::number_integer:
    case Value::value_t::number_unsigned: return v.get<std::int64_t>() != 0;
    case Value::value_t::number_float: return v.get<double>() != 0;
    case Value::value_t::string: return !v.get_ref<const std::string&>().empty();
    case Value::value_t::array: return !v.empty();
    case Value::value_t::object: return is_namespace(v) || !v.empty();
    default: return true;
  }
}

std::string type_name(const Value& v) {
  switch (v.type()) {
    case Value::value_t::discarded: return "undefined";
    case Value::value_t::null: return "none";
    case Value::value_t::boolean: return "a boolean";
    case Value::value_t::string: return "a string";
    case Value::value_t::array: return "a list";
    case Value::value_t::object: return "a mapping";
    default: return "a number";
  }
}

// UTF-8 code points, as Python's str indexes them.
std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
  const std::string set = chars.empty() ? std::string(" \t\n\r\f\v") : chars;
  std::size_t b = 0, e = s.size();
  if (left)
    while (b < e && set.find(s[b]) != std::string::npos) ++b;
  if (right)
    while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

std::int64_t python_floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

class Renderer {
 public:
  Renderer(const Value& context, const std::string& source) : source_(source) {
    frames_.emplace_back();
    if (context.is_object())
      for (auto it = context.begin(); it != context.end(); ++it) frames_[0][it.key()] = it.value();
  }

  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body, std::string& out) {
    for (const auto& s : body) {
      const Flow f = exec(*s, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

 private:
  InvalidArgument fail(int line, const std::string& what) const {
    return InvalidArgument(source_, "chat_template", "line " + std::to_string(line) + ": " + what,
                           "the template does not render these messages; check the roles and contents sent");
  }

  // ---- statements

  // A template that loops or recurses without end, or writes without bound, is stopped.
  static constexpr std::int64_t kMaxSteps = 1'000'000;
  static constexpr std::size_t kMaxText = 16u << 20;
  static constexpr int kMaxCalls = 32;
  // Lists and mappings a template builds can nest one in another (set ns.x = [ns.x] in a loop), and
  // copying, comparing or printing a value recurses through its nesting: their number is bounded.
  void built(int line) {
    if (++built_ > 4096) throw fail(line, "the template built more than 4096 lists or mappings");
  }

  void check(const std::string& out, int line) {
    if (++steps_ > kMaxSteps) throw fail(line, "the template ran more than a million steps");
    if (out.size() > kMaxText) throw fail(line, "the template wrote more than 16 MiB");
  }

  // One bound on nesting through blocks, expressions and macro calls together: the stack's.
  struct Nest {
    Nest(Renderer& r, int line) : r_(r) {
      if (++r_.depth_ > 400) throw r_.fail(line, "the template nests deeper than 400 (blocks, expressions and macro calls together)");
    }
    ~Nest() { --r_.depth_; }
    Renderer& r_;
  };

  Flow exec(const Stmt& s, std::string& out) {
    Nest nest(*this, s.line);
    check(out, s.line);
    switch (s.kind) {
      case Stmt::Kind::Text: out += s.text; return Flow::Normal;
      case Stmt::Kind::Output: out += python_str(eval(*s.expr)); return Flow::Normal;
      case Stmt::Kind::If:
        for (std::size_t i = 0; i < s.conditions.size(); ++i)
          if (truthy(eval(*s.conditions[i]))) return exec(s.branches[i], out);
        return exec(s.else_body, out);
      case Stmt::Kind::For: return loop(s, out);
      case Stmt::Kind::Set: assign(s, eval(*s.expr)); return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        std::string text;
        exec(s.body, text);
        assign(s, Value(text));
        return Flow::Normal;
      }
      case Stmt::Kind::Macro: macros_[s.name] = &s; return Flow::Normal;
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  void assign(const Stmt& s, Value v) {
    if (s.targets.size() == 1) {
      frames_.back()[s.targets[0]] = std::move(v);
      return;
    }
    Value* ns = find(s.targets[0]);
    if (!ns || !is_namespace(*ns)) throw fail(s.line, "'" + s.targets[0] + "' is not a namespace(); only a namespace's attributes can be set");
    (*ns)[s.targets[1]] = std::move(v);
  }

  Flow loop(const Stmt& s, std::string& out) {
    std::vector<Value> items;
    for (Value& v : iterate(eval(*s.expr), s.line)) {
      if (s.filter) {
        frames_.emplace_back();
        bind(s, v);
        const bool keep = truthy(eval(*s.filter));
        frames_.pop_back();
        if (!keep) continue;
      }
      items.push_back(std::move(v));
    }
    if (items.empty()) return exec(s.else_body, out);
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
      frames_.emplace_back();
      bind(s, items[static_cast<std::size_t>(i)]);
      Value l = Value::object();
      l["index0"] = i;
      l["index"] = i + 1;
      l["revindex0"] = n - i - 1;
      l["revindex"] = n - i;
      l["first"] = i == 0;
      l["last"] = i == n - 1;
      l["length"] = n;
      if (i > 0) l["previtem"] = items[static_cast<std::size_t>(i - 1)];
      if (i + 1 < n) l["nextitem"] = items[static_cast<std::size_t>(i + 1)];
      frames_.back()["loop"] = std::move(l);
      check(out, s.line);
      const Flow f = exec(s.body, out);
      frames_.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  void bind(const Stmt& s, const Value& v) {
    if (s.targets.size() == 1) {
      frames_.back()[s.targets[0]] = v;
      return;
    }
    if (!v.is_array() || v.size() != s.targets.size())
      throw fail(s.line, "cannot unpack " + type_name(v) + " into " + std::to_string(s.targets.size()) + " loop variables");
    for (std::size_t i = 0; i < s.targets.size(); ++i) frames_.back()[s.targets[i]] = v[i];
  }

  std::vector<Value> iterate(const Value& v, int line) {
    std::vector<Value> out;
    if (v.is_array()) {
      out.assign(v.begin(), v.end());
    } else if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it)
        if (it.key() != kNamespace) out.emplace_back(it.key());
    } else if (v.is_string()) {
      for (auto& c : code_points(v.get<std::string>())) out.emplace_back(std::move(c));
    } else if (!is_undefined(v)) {
      throw fail(line, type_name(v) + " is not iterable");
    }
    return out;
  }

  Value* find(const std::string& name) {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f)
      if (auto it = f->find(name); it != f->end()) return &it->second;
    return nullptr;
  }

  // ---- expressions

  Value eval(const Expr& e) {
    Nest nest(*this, e.line);
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: {
        const Value* v = find(e.name);
        return v ? *v : undefined();
      }
      case Expr::Kind::Attr: return attribute(eval(*e.a), e.name, e.line);
      case Expr::Kind::Index: return item(eval(*e.a), eval(*e.b), e.line);
      case Expr::Kind::Slice: return slice(e);
      case Expr::Kind::Call: return call(e);
      case Expr::Kind::Filter: return filter(e);
      case Expr::Kind::Test: return test(e) != e.negated;
      case Expr::Kind::Not: return !truthy(eval(*e.a));
      case Expr::Kind::Negate: {
        const Value v = eval(*e.a);
        if (v.is_number_integer()) {
          if (v.get<std::int64_t>() == std::numeric_limits<std::int64_t>::min()) throw fail(e.line, "integer overflow");
          return -v.get<std::int64_t>();
        }
        if (v.is_number_float()) return -v.get<double>();
        throw fail(e.line, "cannot negate " + type_name(v));
      }
      case Expr::Kind::Binary: return binary(e);
      case Expr::Kind::Conditional:
        if (truthy(eval(*e.a))) return eval(*e.b);
        return e.c ? eval(*e.c) : undefined();
      case Expr::Kind::List: {
        built(e.line);
        Value l = Value::array();
        for (const auto& x : e.items) l.push_back(eval(*x));
        return l;
      }
      case Expr::Kind::Dict: {
        built(e.line);
        Value d = Value::object();
        for (std::size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value k = eval(*e.items[i]);
          if (!k.is_string()) throw fail(e.line, "mapping keys must be strings here");
          d[k.get<std::string>()] = eval(*e.items[i + 1]);
        }
        return d;
      }
    }
    return undefined();
  }

  Value attribute(const Value& v, const std::string& name, int line) {
    if (is_undefined(v)) throw fail(line, "'" + name + "' of an undefined value");
    if (v.is_object()) return v.contains(name) && name != kNamespace ? v.at(name) : undefined();
    if (v.is_array() && !name.empty() && name.size() < 10 && std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return item(v, Value(std::stoll(name)), line);
    return undefined();
  }

  Value item(const Value& v, const Value& key, int line) {
    if (is_undefined(v)) throw fail(line, "an item of an undefined value");
    if (v.is_object() && key.is_string()) return attribute(v, key.get<std::string>(), line);
    if ((v.is_array() || v.is_string()) && key.is_number_integer()) {
      const bool text = v.is_string();
      const std::vector<std::string> cps = text ? code_points(v.get<std::string>()) : std::vector<std::string>{};
      const auto n = static_cast<std::int64_t>(text ? cps.size() : v.size());
      std::int64_t i = key.get<std::int64_t>();
      if (i < -n || i >= n) return undefined();
      if (i < 0) i += n;
      return text ? Value(cps[static_cast<std::size_t>(i)]) : v[static_cast<std::size_t>(i)];
    }
    return undefined();
  }

  Value slice(const Expr& e) {
    const Value v = eval(*e.a);
    if (!v.is_array() && !v.is_string()) throw fail(e.line, "cannot slice " + type_name(v));
    const bool text = v.is_string();
    const std::vector<std::string> cps = text ? code_points(v.get<std::string>()) : std::vector<std::string>{};
    const auto n = static_cast<std::int64_t>(text ? cps.size() : v.size());
    auto bound = [&](const ExprPtr& x) -> std::optional<std::int64_t> {
      if (!x) return std::nullopt;
      const Value b = eval(*x);
      if (b.is_null()) return std::nullopt;
      if (!b.is_number_integer()) throw fail(e.line, "slice bounds must be integers");
      return b.get<std::int64_t>();
    };
    const std::int64_t step = bound(e.d).value_or(1);
    if (step == 0) throw fail(e.line, "a slice step of zero");
    auto clamp = [&](std::optional<std::int64_t> b, std::int64_t fallback) {
      if (!b) return fallback;
      std::int64_t i = std::clamp<std::int64_t>(*b, -n - 1, n + 1);
      if (i < 0) i += n;
      return step > 0 ? std::clamp<std::int64_t>(i, 0, n) : std::clamp<std::int64_t>(i, -1, n - 1);
    };
    const std::int64_t start = clamp(bound(e.b), step > 0 ? 0 : n - 1), stop = clamp(bound(e.c), step > 0 ? n : -1);
    std::string s;
    Value l = Value::array();
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
      if (text) s += cps[static_cast<std::size_t>(i)];
      else l.push_back(v[static_cast<std::size_t>(i)]);
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    return text ? Value(s) : l;
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.a);
      return truthy(a) ? eval(*e.b) : a;
    }
    if (op == "or") {
      Value a = eval(*e.a);
      return truthy(a) ? a : eval(*e.b);
    }
    const Value a = eval(*e.a), b = eval(*e.b);
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "~") {
      std::string out = python_str(a) + python_str(b);
      if (out.size() > kMaxText) throw fail(e.line, "a string of more than 16 MiB");
      return out;
    }
    if (op == "in" || op == "not in") return contains(b, a, e.line) == (op == "in");
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      bool less = false, more = false;
      if (a.is_number() && b.is_number()) {
        less = a.get<double>() < b.get<double>();
        more = a.get<double>() > b.get<double>();
      } else if (a.is_string() && b.is_string()) {
        less = a.get<std::string>() < b.get<std::string>();
        more = a.get<std::string>() > b.get<std::string>();
      } else {
        throw fail(e.line, "cannot compare " + type_name(a) + " with " + type_name(b));
      }
      return op == "<" ? less : op == ">" ? more : op == "<=" ? !more : !less;
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        if (a.get_ref<const std::string&>().size() + b.get_ref<const std::string&>().size() > kMaxText) throw fail(e.line, "a string of more than 16 MiB");
        return a.get<std::string>() + b.get<std::string>();
      }
      if (a.is_array() && b.is_array()) {
        if (a.size() + b.size() > 1'000'000) throw fail(e.line, "a list of more than a million items");
        Value l = a;
        for (const auto& x : b) l.push_back(x);
        return l;
      }
    }
    if (op == "*" && ((a.is_string() && b.is_number_integer()) || (a.is_number_integer() && b.is_string()))) {
      const std::string& s = a.is_string() ? a.get_ref<const std::string&>() : b.get_ref<const std::string&>();
      const std::int64_t times = (a.is_string() ? b : a).get<std::int64_t>();
      if (s.empty() || times <= 0) return std::string();
      if (static_cast<std::uint64_t>(times) > kMaxText / s.size()) throw fail(e.line, "a repeated string of more than 16 MiB");
      std::string out;
      for (std::int64_t i = 0; i < times; ++i) out += s;
      return out;
    }
    if (!a.is_number() || !b.is_number() || a.is_boolean() || b.is_boolean())
      throw fail(e.line, "cannot apply '" + op + "' to " + type_name(a) + " and " + type_name(b));
    const bool ints = a.is_number_integer() && b.is_number_integer();
    if (ints && op != "/" && op != "**") {
      const std::int64_t x = a.get<std::int64_t>(), y = b.get<std::int64_t>();
      if ((op == "//" || op == "%") && y == 0) throw fail(e.line, "division by zero");
      std::int64_t r = 0;
      // Python's integers do not overflow; templates never need numbers this large.
      if ((op == "+" && __builtin_add_overflow(x, y, &r)) || (op == "-" && __builtin_sub_overflow(x, y, &r)) ||
          (op == "*" && __builtin_mul_overflow(x, y, &r)) || ((op == "//" || op == "%") && y == -1 && x == std::numeric_limits<std::int64_t>::min()))
        throw fail(e.line, "integer overflow");
      if (op == "+" || op == "-" || op == "*") return r;
      if (op == "//") return python_floor_div(x, y);
      if (op == "%") return x - python_floor_div(x, y) * y;
    }
    const double x = a.get<double>(), y = b.get<double>();
    if ((op == "/" || op == "//" || op == "%") && y == 0) throw fail(e.line, "division by zero");
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (op == "/") return x / y;
    if (op == "//") return std::floor(x / y);
    if (op == "%") return x - std::floor(x / y) * y;
    if (op == "**") {
      const double p = std::pow(x, y);
      if (ints && b.get<std::int64_t>() >= 0 && std::abs(p) < 9e18) return static_cast<std::int64_t>(std::llround(p));
      return p;
    }
    throw fail(e.line, "unknown operator '" + op + "'");
  }

  static bool equal(const Value& a, const Value& b) {
    if (is_undefined(a) || is_undefined(b)) return is_undefined(a) && is_undefined(b);
    return a == b;
  }

  bool contains(const Value& haystack, const Value& needle, int line) {
    if (haystack.is_string()) {
      if (!needle.is_string()) throw fail(line, "'in <string>' needs a string on its left, not " + type_name(needle));
      return haystack.get<std::string>().find(needle.get<std::string>()) != std::string::npos;
    }
    if (haystack.is_array()) return std::any_of(haystack.begin(), haystack.end(), [&](const Value& x) { return equal(x, needle); });
    if (haystack.is_object()) return needle.is_string() && haystack.contains(needle.get<std::string>());
    if (is_undefined(haystack)) return false;  // as Jinja's Undefined answers
    throw fail(line, "'in' needs a string, list or mapping on its right, not " + type_name(haystack));
  }

  // ---- calls: methods, globals, macros

  std::vector<Value> positional(const Args& args) {
    std::vector<Value> out;
    for (const auto& a : args.positional) out.push_back(eval(*a));
    return out;
  }
  Value named(const Args& args, const std::string& name, std::vector<Value>& pos, std::size_t index, Value fallback) {
    for (const auto& [n, x] : args.named)
      if (n == name) return eval(*x);
    return index < pos.size() ? pos[index] : fallback;
  }

  Value call(const Expr& e) {
    if (e.a->kind == Expr::Kind::Attr) return method(eval(*e.a->a), e.a->name, e);
    if (e.a->kind != Expr::Kind::Name) throw fail(e.line, "only functions, macros and methods can be called");
    const std::string& f = e.a->name;
    std::vector<Value> pos = positional(e.args);
    if (const auto m = macros_.find(f); m != macros_.end() && !find(f)) return macro(*m->second, e, pos);
    if (f == "raise_exception") {
      const std::string msg = pos.empty() ? "raise_exception() was called" : python_str(pos[0]);
      throw InvalidArgument(source_, "chat_template", msg, "the model's chat template refuses these messages; change them as it says");
    }
    if (f == "namespace") {
      built(e.line);
      Value ns = Value::object();
      ns[kNamespace] = true;
      if (!pos.empty() && pos[0].is_object())
        for (auto it = pos[0].begin(); it != pos[0].end(); ++it) ns[it.key()] = it.value();
      for (const auto& [n, x] : e.args.named) ns[n] = eval(*x);
      return ns;
    }
    if (f == "dict") {
      built(e.line);
      Value d = Value::object();
      for (const auto& [n, x] : e.args.named) d[n] = eval(*x);
      return d;
    }
    if (f == "range") {
      for (const Value& v : pos)
        if (!v.is_number_integer()) throw fail(e.line, "range() takes integers");
      std::int64_t start = 0, stop = 0, step = 1;
      if (pos.size() == 1) stop = pos[0].get<std::int64_t>();
      else if (pos.size() >= 2) start = pos[0].get<std::int64_t>(), stop = pos[1].get<std::int64_t>();
      if (pos.size() == 3) step = pos[2].get<std::int64_t>();
      if (step == 0 || pos.empty() || pos.size() > 3) throw fail(e.line, "range() takes 1 to 3 integers, with a step other than 0");
      Value l = Value::array();
      for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (l.size() >= 1'000'000) throw fail(e.line, "range() of more than a million numbers");
        l.push_back(i);
        if (__builtin_add_overflow(i, step, &i)) break;
      }
      return l;
    }
    if (f == "strftime_now") {
      if (pos.empty() || !pos[0].is_string()) throw fail(e.line, "strftime_now() takes a format string");
      const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const std::size_t n = std::strftime(buf, sizeof buf, pos[0].get<std::string>().c_str(), &tm);
      return std::string(buf, n);
    }
    throw fail(e.line, "'" + f + "' is not a function this renderer knows (raise_exception, namespace, range, dict, strftime_now, or a macro)");
  }

  Value macro(const Stmt& m, const Expr& e, std::vector<Value>& pos) {
    if (pos.size() > m.params.size()) throw fail(e.line, "macro '" + m.name + "' takes " + std::to_string(m.params.size()) + " arguments");
    if (calls_ >= kMaxCalls) throw fail(e.line, "macros called " + std::to_string(kMaxCalls) + " deep");
    ++calls_;
    struct Leave {
      int& c;
      ~Leave() { --c; }
    } leave{calls_};
    frames_.emplace_back();
    for (std::size_t i = 0; i < m.params.size(); ++i) {
      const auto& [name, def] = m.params[i];
      Value v = i < pos.size() ? pos[i] : def ? eval(*def) : undefined();
      for (const auto& [n, x] : e.args.named)
        if (n == name) v = eval(*x);
      frames_.back()[name] = std::move(v);
    }
    std::string out;
    exec(m.body, out);
    frames_.pop_back();
    return out;
  }

  Value method(const Value& self, const std::string& name, const Expr& e) {
    std::vector<Value> pos = positional(e.args);
    auto str_arg = [&](std::size_t i) -> std::string {
      if (i >= pos.size() || pos[i].is_null()) return {};
      if (!pos[i].is_string()) throw fail(e.line, name + "() takes strings");
      return pos[i].get<std::string>();
    };
    if (self.is_string()) {
      const std::string& s = self.get_ref<const std::string&>();
      if (name == "strip") return strip(s, str_arg(0), true, true);
      if (name == "lstrip") return strip(s, str_arg(0), true, false);
      if (name == "rstrip") return strip(s, str_arg(0), false, true);
      if (name == "upper" || name == "lower") {
        std::string out = s;
        for (char& c : out) c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
        return out;
      }
      if (name == "startswith" || name == "endswith") {
        std::vector<std::string> options;
        if (!pos.empty() && pos[0].is_array()) {
          for (const auto& x : pos[0]) options.push_back(x.is_string() ? x.get<std::string>() : "");
        } else {
          options.push_back(str_arg(0));
        }
        return std::any_of(options.begin(), options.end(), [&](const std::string& o) { return name == "startswith" ? s.starts_with(o) : s.ends_with(o); });
      }
      if (name == "split") {
        const std::string sep = str_arg(0);
        const std::int64_t max = pos.size() > 1 && pos[1].is_number_integer() ? pos[1].get<std::int64_t>() : -1;
        Value parts = Value::array();
        if (sep.empty()) {  // runs of whitespace
          std::size_t i = 0;
          while (i < s.size()) {
            while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
            if (i >= s.size()) break;
            if (max >= 0 && static_cast<std::int64_t>(parts.size()) == max) {
              parts.push_back(strip(s.substr(i), "", false, true));
              break;
            }
            std::size_t j = i;
            while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
            parts.push_back(s.substr(i, j - i));
            i = j;
          }
          return parts;
        }
        std::size_t at = 0;
        for (std::size_t hit; (max < 0 || static_cast<std::int64_t>(parts.size()) < max) && (hit = s.find(sep, at)) != std::string::npos; at = hit + sep.size())
          parts.push_back(s.substr(at, hit - at));
        parts.push_back(s.substr(at));
        return parts;
      }
      if (name == "replace") return replace(s, str_arg(0), str_arg(1));
      if (name == "join") {
        if (pos.empty()) throw fail(e.line, "join() takes a list");
        std::string out;
        bool first = true;
        for (const Value& x : iterate(pos[0], e.line)) {
          out += (first ? "" : s) + python_str(x);
          first = false;
        }
        return out;
      }
      if (name == "title" || name == "capitalize") return filter_named(name, self, {}, e);
    }
    if (self.is_object() && !is_namespace(self)) {
      if (name == "items") {
        Value l = Value::array();
        for (auto it = self.begin(); it != self.end(); ++it) l.push_back(Value::array({it.key(), it.value()}));
        return l;
      }
      if (name == "keys" || name == "values") {
        Value l = Value::array();
        for (auto it = self.begin(); it != self.end(); ++it) l.push_back(name == "keys" ? Value(it.key()) : it.value());
        return l;
      }
      if (name == "get") {
        if (pos.empty() || !pos[0].is_string()) throw fail(e.line, "get() takes a key");
        const std::string& k = pos[0].get_ref<const std::string&>();
        return self.contains(k) ? self.at(k) : pos.size() > 1 ? pos[1] : Value(nullptr);
      }
    }
    if (self.is_object() && self.contains("index0") && self["index0"].is_number_integer() && self["index0"].get<std::int64_t>() >= 0 &&
        name == "cycle" && !pos.empty())  // loop.cycle(…)
      return pos[static_cast<std::size_t>(self["index0"].get<std::int64_t>()) % pos.size()];
    throw fail(e.line, type_name(self) + " has no method '" + name + "' here");
  }

  static std::string replace(const std::string& s, const std::string& from, const std::string& to) {
    if (from.empty()) return s;
    std::string out;
    std::size_t at = 0;
    for (std::size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) out += s.substr(at, hit - at) + to;
    return out + s.substr(at);
  }

  // ---- filters and tests

  Value filter(const Expr& e) {
    const Value v = eval(*e.a);
    return filter_named(e.name, v, positional(e.args), e);
  }

  Value filter_named(const std::string& f, const Value& v, std::vector<Value> pos, const Expr& e) {
    auto need_string = [&]() -> const std::string& {
      if (!v.is_string()) throw fail(e.line, "'" + f + "' needs a string, not " + type_name(v));
      return v.get_ref<const std::string&>();
    };
    if (f == "trim") return strip(need_string(), pos.empty() || !pos[0].is_string() ? "" : pos[0].get<std::string>(), true, true);
    if (f == "length" || f == "count") {
      if (v.is_string()) return static_cast<std::int64_t>(code_points(v.get<std::string>()).size());
      if (v.is_array() || v.is_object()) return static_cast<std::int64_t>(iterate(v, e.line).size());
      if (is_undefined(v)) return 0;
      throw fail(e.line, type_name(v) + " has no length");
    }
    if (f == "tojson") {
      const Value indent = named(e.args, "indent", pos, 0, Value(nullptr));
      const Value sort = named(e.args, "sort_keys", pos, 2, Value(false));
      if (indent.is_number_integer() && (indent.get<std::int64_t>() < 0 || indent.get<std::int64_t>() > 32)) throw fail(e.line, "tojson's indent must be 0 to 32");
      return python_json(v, indent.is_number_integer() ? std::optional<int>(indent.get<int>()) : std::nullopt, truthy(sort));
    }
    if (f == "string") return python_str(v);
    if (f == "safe") return v;
    if (f == "upper" || f == "lower") return method(Value(need_string()), f, e);
    if (f == "capitalize" || f == "title") {
      std::string s = need_string();
      bool start = true;
      for (char& c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (f == "capitalize") c = static_cast<char>(start ? std::toupper(u) : std::tolower(u)), start = false;
        else {
          c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
          start = !std::isalnum(u);
        }
      }
      return s;
    }
    if (f == "replace") {
      if (pos.size() < 2 || !pos[0].is_string() || !pos[1].is_string()) throw fail(e.line, "replace takes two strings");
      return replace(need_string(), pos[0].get<std::string>(), pos[1].get<std::string>());
    }
    if (f == "first" || f == "last") {
      const std::vector<Value> items = iterate(v, e.line);
      if (items.empty()) return undefined();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "reverse") {
      if (v.is_string()) {
        std::vector<std::string> cps = code_points(v.get<std::string>());
        std::string out;
        for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
        return out;
      }
      std::vector<Value> items = iterate(v, e.line);
      return Value(std::vector<Value>(items.rbegin(), items.rend()));
    }
    if (f == "list") return Value(iterate(v, e.line));
    if (f == "items") return method(v, "items", e);
    if (f == "join") {
      const Value sep = named(e.args, "d", pos, 0, Value(""));
      const Value attr = named(e.args, "attribute", pos, 1, Value(nullptr));
      std::string out;
      bool first = true;
      for (const Value& x : iterate(v, e.line)) {
        out += (first ? "" : python_str(sep)) + python_str(attr.is_string() ? attribute(x, attr.get<std::string>(), e.line) : x);
        first = false;
      }
      return out;
    }
    if (f == "default" || f == "d") {
      const Value fallback = named(e.args, "default_value", pos, 0, Value(""));
      const bool boolean = truthy(named(e.args, "boolean", pos, 1, Value(false)));
      return (is_undefined(v) || (boolean && !truthy(v))) ? fallback : v;
    }
    if (f == "int") {
      if (v.is_number_integer()) return v;
      if (v.is_number() && std::abs(v.get<double>()) < 9e18) return static_cast<std::int64_t>(v.get<double>());
      if (v.is_string()) try {
          return std::stoll(v.get<std::string>());
        } catch (...) {
        }
      return pos.empty() ? Value(0) : pos[0];
    }
    if (f == "float") {
      if (v.is_number()) return v.get<double>();
      if (v.is_string()) try {
          return std::stod(v.get<std::string>());
        } catch (...) {
        }
      return pos.empty() ? Value(0.0) : pos[0];
    }
    if (f == "abs" && v.is_number()) {
      if (!v.is_number_integer()) return std::fabs(v.get<double>());
      if (v.get<std::int64_t>() == std::numeric_limits<std::int64_t>::min()) throw fail(e.line, "integer overflow");
      return std::llabs(v.get<std::int64_t>());
    }
    if (f == "selectattr" || f == "rejectattr") {
      if (pos.empty() || !pos[0].is_string()) throw fail(e.line, f + " takes an attribute name");
      Value out = Value::array();
      for (const Value& x : iterate(v, e.line)) {
        const Value a = attribute(x, pos[0].get<std::string>(), e.line);
        const bool pass = pos.size() < 2 ? truthy(a) : test_named(pos[1].is_string() ? pos[1].get<std::string>() : "", a, {pos.begin() + 2, pos.end()}, e);
        if (pass == (f == "selectattr")) out.push_back(x);
      }
      return out;
    }
    if (f == "map") {
      const Value attr = named(e.args, "attribute", pos, 99, Value(nullptr));
      Value out = Value::array();
      for (const Value& x : iterate(v, e.line)) {
        if (attr.is_string()) out.push_back(attribute(x, attr.get<std::string>(), e.line));
        else if (!pos.empty() && pos[0].is_string()) out.push_back(filter_named(pos[0].get<std::string>(), x, {pos.begin() + 1, pos.end()}, e));
        else throw fail(e.line, "map takes attribute= or a filter's name");
      }
      return out;
    }
    throw fail(e.line, "'" + f + "' is not a filter this renderer knows");
  }

  bool test(const Expr& e) {
    // The functions the renderer provides (and the template's macros) are defined, as Jinja's are.
    if ((e.name == "defined" || e.name == "undefined") && e.a->kind == Expr::Kind::Name && !find(e.a->name) &&
        (macros_.contains(e.a->name) || is_global(e.a->name)))
      return e.name == "defined";
    return test_named(e.name, eval(*e.a), positional(e.args), e);
  }
  static bool is_global(const std::string& name) {
    return name == "raise_exception" || name == "namespace" || name == "range" || name == "dict" || name == "strftime_now";
  }

  bool test_named(const std::string& t, const Value& v, const std::vector<Value>& pos, const Expr& e) {
    if (t == "defined") return !is_undefined(v);
    if (t == "undefined") return is_undefined(v);
    if (t == "none") return v.is_null();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number() && !v.is_boolean();
    if (t == "integer") return v.is_number_integer();
    if (t == "float") return v.is_number_float();
    if (t == "boolean") return v.is_boolean();
    if (t == "true") return v.is_boolean() && v.get<bool>();
    if (t == "false") return v.is_boolean() && !v.get<bool>();
    if (t == "mapping") return v.is_object();
    if (t == "sequence") return v.is_array() || v.is_string() || v.is_object();
    if (t == "iterable") return v.is_array() || v.is_string() || v.is_object();
    if (t == "callable") return false;
    if (t == "lower" || t == "upper") {
      if (!v.is_string()) return false;
      const std::string& s = v.get_ref<const std::string&>();
      return std::none_of(s.begin(), s.end(), [&](char c) { return t == "lower" ? std::isupper(static_cast<unsigned char>(c)) : std::islower(static_cast<unsigned char>(c)); });
    }
    if (pos.empty() && (t == "odd" || t == "even")) {
      if (!v.is_number_integer()) throw fail(e.line, "'" + t + "' needs an integer");
      return (v.get<std::int64_t>() % 2 != 0) == (t == "odd");
    }
    if (pos.empty()) throw fail(e.line, "'" + t + "' is not a test this renderer knows, or it needs an argument");
    const Value& x = pos[0];
    if (t == "equalto" || t == "eq" || t == "==" || t == "sameas") return equal(v, x);
    if (t == "ne" || t == "!=") return !equal(v, x);
    if (t == "in") return contains(x, v, e.line);
    if (t == "divisibleby") {
      if (!v.is_number_integer() || !x.is_number_integer() || x.get<std::int64_t>() == 0) throw fail(e.line, "'divisibleby' needs integers");
      return v.get<std::int64_t>() % x.get<std::int64_t>() == 0;
    }
    throw fail(e.line, "'" + t + "' is not a test this renderer knows");
  }

  const std::string& source_;
  std::vector<std::map<std::string, Value>> frames_;
  std::map<std::string, const Stmt*> macros_;
  std::int64_t steps_ = 0;
  int calls_ = 0, depth_ = 0, built_ = 0;
};

}  // namespace

std::string render(const Body& body, const Value& context, const std::string& source) {
  Renderer r(context, source);
  std::string out;
  r.exec(body, out);
  return out;
}

}  // namespace mosaic::jinja
