#include "model/jinja/python_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/error.h"

namespace mosaic::jinja {
namespace {

// Python's repr of a str: single quotes unless the text holds ' and no ".
std::string quoted(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == q || ch == '\\') out += '\\', out += ch;
    else if (ch == '\n') out += "\\n";
    else if (ch == '\r') out += "\\r";
    else if (ch == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else out += ch;
  }
  return out + q;
}

// json.dumps' string with ensure_ascii off is nlohmann's (the same escapes, \u00xx in lower case);
// bytes that are not UTF-8 become U+FFFD rather than throwing.
std::string json_string(const std::string& s) { return Value(s).dump(-1, ' ', false, Value::error_handler_t::replace); }

void json_into(const Value& v, std::optional<int> indent, bool sort_keys, int depth, std::string& out) {
  const auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<std::size_t>(*indent * d), ' ');
  };
  const std::string item_sep = indent ? "," : ", ";
  switch (v.type()) {
    case Value::value_t::discarded: throw InvalidArgument("chat template", "tojson", "an undefined value is not JSON serializable");
    case Value::value_t::null: out += "null"; return;
    case Value::value_t::boolean: out += v.get<bool>() ? "true" : "false"; return;
    case Value::value_t::number_float: {
      const double x = v.get<double>();
      out += std::isnan(x) ? "NaN" : std::isinf(x) ? (x > 0 ? "Infinity" : "-Infinity") : python_float(x);
      return;
    }
    case Value::value_t::string: out += json_string(v.get<std::string>()); return;
    case Value::value_t::array: {
      if (v.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out += item_sep;
        if (indent) newline(depth + 1);
        json_into(v[i], indent, sort_keys, depth + 1, out);
      }
      if (indent) newline(depth);
      out += ']';
      return;
    }
    case Value::value_t::object: {
      if (v.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::string> keys;
      for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
      if (sort_keys) std::sort(keys.begin(), keys.end());
      out += '{';
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (i) out += item_sep;
        if (indent) newline(depth + 1);
        out += json_string(keys[i]) + ": ";
        json_into(v.at(keys[i]), indent, sort_keys, depth + 1, out);
      }
      if (indent) newline(depth);
      out += '}';
      return;
    }
    default: out += v.dump(); return;  // integers
  }
}

std::string text_of(const Value& v, bool repr) {
  switch (v.type()) {
    case Value::value_t::discarded: return "";
    case Value::value_t::null: return "None";
    case Value::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case Value::value_t::number_float: return python_float(v.get<double>());
    case Value::value_t::string: return repr ? quoted(v.get<std::string>()) : v.get<std::string>();
    case Value::value_t::array: {
      std::string out = "[";
      for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + text_of(v[i], true);
      return out + "]";
    }
    case Value::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        out += (first ? "" : ", ") + quoted(it.key()) + ": " + text_of(it.value(), true);
        first = false;
      }
      return out + "}";
    }
    default: return v.dump();
  }
}

}  // namespace

std::string python_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  // The shortest digits that read back as x, placed as Python's repr places them: positional
  // for exponents -4 … 15, scientific otherwise.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, std::abs(x), std::chars_format::scientific);
  const std::string sci(buf, r.ptr);
  const std::size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  std::string out = x < 0 ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(static_cast<std::size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(exp + 1)) + "." + digits.substr(static_cast<std::size_t>(exp + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out.append(".").append(digits, 1);  // (not "." + …: GCC 12 warns falsely)
  char ex[16];
  std::snprintf(ex, sizeof ex, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ex;
}

std::string python_str(const Value& v) { return text_of(v, false); }
std::string python_repr(const Value& v) { return text_of(v, true); }

std::string python_json(const Value& v, std::optional<int> indent, bool sort_keys) {
  std::string out;
  json_into(v, indent, sort_keys, 0, out);
  return out;
}

}  // namespace mosaic::jinja
