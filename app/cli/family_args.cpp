#include "cli/family_args.h"

#include <algorithm>

#include "common/error.h"

namespace fs = std::filesystem;

namespace mosaic::cli {

// A folder is a checkpoint when it holds config.json; otherwise its checkpoint subfolders are a family.
std::vector<std::pair<std::string, fs::path>> variants_in(const std::vector<fs::path>& dirs) {
  std::vector<std::pair<std::string, fs::path>> out;
  for (const fs::path& d : dirs) {
    if (fs::exists(d / "config.json") || !fs::is_directory(d)) {
      out.emplace_back(d.filename().empty() ? d.parent_path().filename().string() : d.filename().string(), d);
      continue;
    }
    std::vector<fs::path> subs;
    for (const auto& e : fs::directory_iterator(d))
      if (e.is_directory() && fs::exists(e.path() / "config.json")) subs.push_back(e.path());
    if (subs.empty())
      throw MissingError(d.string(), "", "holds no config.json and no checkpoint subfolders",
                         "point at a checkpoint folder or a folder of variants");
    std::sort(subs.begin(), subs.end());
    for (const auto& s : subs) out.emplace_back(s.filename().string(), s);
  }
  return out;
}

void open_family(Family& family, const std::vector<fs::path>& dirs) {
  for (const auto& [name, dir] : variants_in(dirs)) family.add(name, dir);
}

}  // namespace mosaic::cli
