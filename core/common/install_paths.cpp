#include "common/install_paths.h"

#include <cstdlib>
#include <system_error>

namespace mosaic {
namespace {

bool holds_samples(const std::filesystem::path& dir) {
  std::error_code ec;
  return !dir.empty() && std::filesystem::is_directory(dir / "sample_configs", ec);
}

}  // namespace

std::filesystem::path shipped_data_dir() {
  if (const char* env = std::getenv("MOSAIC_DATA_DIR"); env && *env) return env;
  std::error_code ec;
  // The program itself, not argv[0]: it may have been started through a link or from PATH.
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed = exe.parent_path().parent_path() / "share" / "mosaic";
    if (holds_samples(installed)) return installed;
  }
  const std::filesystem::path source = MOSAIC_SOURCE_DIR;
  return holds_samples(source) ? source : std::filesystem::path();
}

}  // namespace mosaic
