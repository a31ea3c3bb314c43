#include "common/json_text.h"

#include <algorithm>
#include <unordered_set>

#include "common/edit_distance.h"
#include "common/error.h"

namespace mosaic {

nlohmann::json parse_json_bounded(std::string_view text, const std::string& file) {
  // Keys seen in each object being read, innermost last: a repeated key is refused (JSON parsers
  // disagree on which copy wins, so a file that repeats one means different things to different tools).
  std::vector<std::unordered_set<std::string>> keys;
  const nlohmann::json::parser_callback_t check = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (depth > kMaxJsonDepth && (event == E::object_start || event == E::array_start))
      throw FormatError(file, "", "nests objects or arrays deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                        "no file Mosaic reads is nested that deep: check that it is the file you meant");
    if (event == E::object_start) keys.emplace_back();
    if (event == E::object_end && !keys.empty()) keys.pop_back();
    if (event == E::key && !keys.empty()) {
      std::string key = parsed.get<std::string>();
      if (!keys.back().insert(key).second) throw FormatError(file, "field '" + key + "'", "appears twice in one object", "keep one of them");
    }
    return true;
  };
  return nlohmann::json::parse(text.begin(), text.end(), check);
}

nlohmann::json parse_json(const std::string& text, const std::string& file, const std::string& hint, const std::string& where) {
  try {
    return parse_json_bounded(text, file);
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

}  // namespace mosaic
