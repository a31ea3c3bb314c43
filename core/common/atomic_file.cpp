#include "common/atomic_file.h"

#include <unistd.h>

#include <fstream>
#include <random>

#include "common/error.h"

namespace mosaic {

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write) {
  std::random_device rd;
  auto tmp = path;
  tmp += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out)
        throw IoError(path.string(), "", "cannot create file",
                      "check that the folder exists and is writable");
      write(out);
      out.flush();
      if (!out) throw IoError(path.string(), "", "write failed", "check free disk space");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw IoError(path.string(), "", "cannot move into place: " + ec.message());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
}

}  // namespace mosaic
