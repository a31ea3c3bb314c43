#include "common/jsonl.h"

#include "common/text_file.h"

#include <fstream>

#include "common/error.h"
#include "common/json_text.h"

namespace mosaic {

void read_jsonl(const std::filesystem::path& path, const std::string& hint,
                const std::function<void(const std::string& where, const nlohmann::json& object)>& each) {
  require_regular_file(path, "check the path");
  std::ifstream in(path);
  if (!in) throw IoError(path.string(), "", "cannot be read", "check the path");
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "line " + std::to_string(n);
    const auto j = parse_json(line, path.string(), hint, where);
    if (!j.is_object()) throw FormatError(path.string(), where, "is not a JSON object", hint);
    each(where, j);
  }
}

}  // namespace mosaic
