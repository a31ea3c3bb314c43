#include "model/variant_folders.h"

#include <algorithm>

#include "common/error.h"

namespace fs = std::filesystem;

namespace mosaic {
namespace {

fs::path canonical_or_self(const fs::path& p) {
  std::error_code ec;
  const auto c = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c;
}

std::string folder_name(const fs::path& d) {
  const fs::path n = d.lexically_normal();
  return n.filename().empty() ? n.parent_path().filename().string() : n.filename().string();
}

}  // namespace

std::vector<std::pair<std::string, fs::path>> discover_variants(const std::vector<fs::path>& dirs) {
  std::vector<std::pair<std::string, fs::path>> out;
  for (const fs::path& d : dirs) {
    if (fs::exists(d / "config.json") || !fs::is_directory(d)) {
      out.emplace_back(folder_name(d), d);
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
  for (const auto& [name, dir] : discover_variants(dirs)) family.add(name, dir);
  std::vector<fs::path> bases;
  for (const Variant& v : family.variants())
    if (v.checkpoint->is_adapter()) bases.push_back(v.checkpoint->base_dir());
  for (const fs::path& base : bases) {
    const auto have = std::find_if(family.variants().begin(), family.variants().end(), [&](const Variant& v) {
      return canonical_or_self(v.checkpoint->dir()) == canonical_or_self(base);
    });
    if (have != family.variants().end()) continue;
    std::string name = folder_name(base);
    while (family.find(name)) name += "-base";
    family.add(name, base);
  }
}

}  // namespace mosaic
