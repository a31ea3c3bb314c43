#pragma once
// JSON Lines files (workload traces, `logits --requests`): one object per line, blank lines skipped.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace mosaic {

// Calls `each(where, object)` for every non-blank line, `where` being "line N". Throws IoError when
// the file cannot be read and FormatError naming the line when one is not a JSON object; `hint`
// says what a line should hold.
using JsonlEach = std::function<void(const std::string& where, const nlohmann::json& object)>;
void read_jsonl(const std::filesystem::path& path, const std::string& hint, const JsonlEach& each);
// The same over a file's text; `file` names it in errors.
void for_each_jsonl_line(std::string_view text, const std::string& file, const std::string& hint, const JsonlEach& each);

}  // namespace mosaic
