#include "common/jsonl.h"

#include <fstream>

#include "common/error.h"
#include "common/json_text.h"
#include "common/text_file.h"

namespace mosaic {

namespace {

void each_line(std::string_view line, std::size_t n, const std::string& file, const std::string& hint, const JsonlEach& each) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
  const std::string where = "line " + std::to_string(n);
  const auto j = parse_json(line, file, hint, where);
  if (!j.is_object()) throw FormatError(file, where, "is not a JSON object", hint);
  each(where, j);
}

}  // namespace

// Streamed a line at a time: traces and request files may be larger than is sensible to hold whole.
void read_jsonl(const std::filesystem::path& path, const std::string& hint, const JsonlEach& each) {
  require_regular_file(path, "check the path");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string(), "", "cannot be read", "check the path");
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) each_line(line, n, path.string(), hint, each);
  if (in.bad()) throw IoError(path.string(), "", "could not be read to the end", "check the file");
}

void for_each_jsonl_line(std::string_view text, const std::string& file, const std::string& hint, const JsonlEach& each) {
  for (std::size_t n = 1; !text.empty(); ++n) {
    const std::size_t end = text.find('\n');
    each_line(text.substr(0, end), n, file, hint, each);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
  }
}

}  // namespace mosaic
