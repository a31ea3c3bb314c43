#include "common/text_file.h"

#include <fstream>
#include <sstream>
#include <system_error>

#include "common/byte_size.h"
#include "common/error.h"

namespace mosaic {

void require_regular_file(const std::filesystem::path& path, const std::string& hint) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec == std::errc::too_many_symbolic_link_levels)
    throw IoError(path.string(), "", "is a loop of symbolic links", hint.empty() ? "point at the file itself" : hint);
  if (ec || !std::filesystem::exists(status)) return;
  if (!std::filesystem::is_regular_file(status))
    throw IoError(path.string(), "",
                  std::filesystem::is_directory(status) ? "is a folder, not a file" : "is not a regular file (a FIFO, socket or device)",
                  hint.empty() ? "point at the file itself" : hint);
}

bool file_present(const std::filesystem::path& path, const std::string& hint) {
  require_regular_file(path, hint);
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

std::string read_text_file(const std::filesystem::path& path, const std::string& hint, std::uintmax_t max_bytes) {
  require_regular_file(path, hint);
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); !ec && size > max_bytes)
    throw IoError(path.string(), "", "is " + format_bytes(size) + ", more than the " + format_bytes(max_bytes) + " such a file can be",
                  hint.empty() ? "check that it is the file you meant" : hint);
  std::ifstream in(path, std::ios::binary);
  std::error_code missing;
  if (!in && !std::filesystem::exists(path, missing)) throw IoError(path.string(), "", "does not exist", hint);
  if (!in) throw IoError(path.string(), "", "cannot be read", hint);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(path.string(), "", "could not be read to the end", hint);
  return ss.str();
}

}  // namespace mosaic
