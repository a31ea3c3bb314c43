#include "common/json_text.h"

#include <algorithm>

#include "common/edit_distance.h"
#include "common/error.h"

namespace mosaic {

nlohmann::json parse_json(const std::string& text, const std::string& file, const std::string& hint, const std::string& where) {
  try {
    return nlohmann::json::parse(text);
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
