#include "common/jsonl.h"

#include "common/error.h"
#include "common/json_text.h"
#include "common/text_file.h"

namespace mosaic {

void read_jsonl(const std::filesystem::path& path, const std::string& hint, const JsonlEach& each) {
  for_each_jsonl_line(read_text_file(path, "check the path"), path.string(), hint, each);
}

void for_each_jsonl_line(std::string_view text, const std::string& file, const std::string& hint, const JsonlEach& each) {
  std::size_t n = 0;
  while (!text.empty()) {
    ++n;
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = "line " + std::to_string(n);
    const auto j = parse_json(line, file, hint, where);
    if (!j.is_object()) throw FormatError(file, where, "is not a JSON object", hint);
    each(where, j);
  }
}

}  // namespace mosaic
