#include "common/text_file.h"

#include <fstream>
#include <sstream>

#include "common/error.h"

namespace mosaic {

std::string read_text_file(const std::filesystem::path& path, const std::string& hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string(), "", "cannot be read", hint);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(path.string(), "", "could not be read to the end", hint);
  return ss.str();
}

}  // namespace mosaic
