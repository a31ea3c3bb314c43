#pragma once
// JSON that people write (sweep configs, sessions, request lines): syntax errors and misspelt keys
// reported where they are, in words, instead of "is not a JSON object" or a silently ignored key.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace mosaic {

// Deeper nesting than any file Mosaic reads has: refused while parsing, so that no walk of the
// result (and no destructor) recurses without bound.
inline constexpr int kMaxJsonDepth = 128;

// nlohmann::json::parse with the nesting bounded: a deeper document is a FormatError naming `file`;
// other parse failures are nlohmann's exceptions, as json::parse throws them.
nlohmann::json parse_json_bounded(std::string_view text, const std::string& file);

// Parses `text`; a syntax error is a FormatError naming `file` (and `where`, e.g. "line 3" of a
// JSON Lines file), the line and column, and what the parser expected.
nlohmann::json parse_json(std::string_view text, const std::string& file, const std::string& hint,
                          const std::string& where = {});

// Refuses a key of `object` that is not in `allowed`, naming the nearest allowed one. `where`
// names the object ("strategies[2]"; "" for the top level).
void check_keys(const nlohmann::json& object, const std::vector<std::string_view>& allowed, const std::string& file,
                const std::string& where, const std::string& hint);

// Refuses an object whose "schema" is not `expected` (missing, another version, not a string) with
// an UnsupportedError naming `file`, what the field holds, and `hint` (where to find a good one).
void check_schema(const nlohmann::json& object, std::string_view expected, const std::string& file, const std::string& hint = {});

}  // namespace mosaic
