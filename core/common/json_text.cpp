#include "common/json_text.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/edit_distance.h"
#include "common/error.h"

namespace mosaic {

namespace {

// nlohmann's DOM builder behind a SAX filter that counts depth and the keys of each open object.
// (A parser callback would do the same checks, but with it nlohmann 3.11 rescans the parent at the
// end of every nested object: quadratic in the siblings, a hang for a crafted 100 MB header.)
class BoundedDom {
 public:
  using json = nlohmann::json;
  BoundedDom(json& out, const std::string& file) : dom_(out, /*allow_exceptions=*/true), file_(file) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    enter();
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  // Parsers disagree on which copy of a repeated key wins: a file that repeats one means different
  // things to different tools, so it is refused.
  bool key(json::string_t& k) {
    if (!keys_.back().insert(k).second) throw FormatError(file_, "field '" + k + "'", "appears twice in one object", "keep one of them");
    return dom_.key(k);
  }
  bool end_object() {
    keys_.pop_back();
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    enter();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& e) {
    return dom_.parse_error(position, token, e);
  }

 private:
  void enter() {
    if (++depth_ > kMaxJsonDepth)
      throw FormatError(file_, "", "nests objects or arrays deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                        "no file Mosaic reads is nested that deep: check that it is the file you meant");
  }
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  const std::string& file_;
  int depth_ = 0;
  std::vector<std::unordered_set<std::string>> keys_;
};

}  // namespace

nlohmann::json parse_json_bounded(std::string_view text, const std::string& file) {
  // nlohmann skips a leading byte-order mark; Python's json (so transformers) and safetensors refuse
  // one, so a file Mosaic took would fail elsewhere.
  if (text.starts_with("\xEF\xBB\xBF"))
    throw FormatError(file, "", "starts with a UTF-8 byte-order mark, which JSON does not allow (Python's json refuses it too)",
                      "save the file as UTF-8 without a BOM");
  nlohmann::json out;
  BoundedDom sax(out, file);
  nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
  return out;
}

nlohmann::json parse_json(std::string_view text, const std::string& file, const std::string& hint, const std::string& where) {
  try {
    return parse_json_bounded(text, file);
  } catch (const FormatError& e) {  // too deep, or a repeated key: say where, as for syntax errors
    if (where.empty()) throw;
    throw FormatError(file, e.item().empty() ? where : where + ": " + e.item(), e.problem(), e.hint().empty() ? hint : e.hint());
  } catch (const nlohmann::json::out_of_range& e) {  // a number beyond double's range, such as 1e400
    throw FormatError(file, where, std::string("holds a number out of range: ") + e.what(), hint);
  } catch (const nlohmann::json::parse_error& e) {
    // Line and column of the byte the parser stopped at (1-based).
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') ++line, column = 1;
      else ++column;
    }
    std::string what = e.what();
    if (const auto colon = what.find("syntax error"); colon != std::string::npos) what = what.substr(colon);
    const std::string at = where.empty() ? "line " + std::to_string(line) : where;
    throw FormatError(file, at + ", column " + std::to_string(column), "is not valid JSON: " + what, hint);
  }
}

void check_keys(const nlohmann::json& object, const std::vector<std::string_view>& allowed, const std::string& file,
                const std::string& where, const std::string& hint) {
  if (!object.is_object()) return;
  for (const auto& [key, value] : object.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    const std::string_view near = nearest_name(key, allowed);
    std::string problem = "is not a field of this file";
    if (!near.empty()) problem += "; did you mean '" + std::string(near) + "'?";
    throw FormatError(file, (where.empty() ? "" : where + ".") + "field '" + key + "'", problem, hint);
  }
}

void check_schema(const nlohmann::json& object, std::string_view expected, const std::string& file, const std::string& hint) {
  const auto at = object.find("schema");
  if (at != object.end() && at->is_string() && at->get<std::string>() == expected) return;
  const std::string found = at == object.end() ? "(missing)" : at->is_string() ? at->get<std::string>() : at->dump();
  throw UnsupportedError(file, "field 'schema'", "is '" + found + "', not '" + std::string(expected) + "'", hint);
}

}  // namespace mosaic
