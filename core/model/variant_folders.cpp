#include "model/variant_folders.h"

#include <algorithm>
#include <optional>
#include <system_error>

#include "common/error.h"
#include "common/path_identity.h"

namespace fs = std::filesystem;

namespace mosaic {
namespace {

std::string folder_name(const fs::path& d) {
  const fs::path n = d.lexically_normal();
  return n.filename().empty() ? n.parent_path().filename().string() : n.filename().string();
}

// Whether `p` is a folder (false: a file; nullopt: absent). A symbolic link loop, in a family folder or
// where config.json should be, is a typed error naming it rather than a filesystem exception.
std::optional<bool> is_folder(const fs::path& p) {
  std::error_code ec;
  const auto st = fs::status(p, ec);
  if (ec == std::errc::too_many_symbolic_link_levels)
    throw IoError(p.string(), "", "is a loop of symbolic links", "remove the link, or point it at a checkpoint folder");
  if (ec || !fs::exists(st)) return std::nullopt;
  return fs::is_directory(st);
}

}  // namespace

std::vector<std::pair<std::string, fs::path>> discover_variants(const std::vector<fs::path>& dirs) {
  std::vector<std::pair<std::string, fs::path>> out;
  for (const fs::path& d : dirs) {
    if (!is_folder(d / "config.json").has_value() && is_folder(d) == true) {  // a family: its subfolders with config.json
      std::vector<fs::path> subs;
      std::error_code ec;
      for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec))
        if (is_folder(it->path()) == true && is_folder(it->path() / "config.json").has_value()) subs.push_back(it->path());
      if (ec) throw IoError(d.string(), "", "cannot be listed: " + ec.message(), "check the folder and its permissions");
      if (subs.empty())
        throw MissingError(d.string(), "", "holds no config.json and no checkpoint subfolders",
                           "point at a checkpoint folder or a folder of variants");
      std::sort(subs.begin(), subs.end());
      for (const auto& s : subs) out.emplace_back(s.filename().string(), s);
      continue;
    }
    out.emplace_back(folder_name(d), d);
  }
  return out;
}

void open_family(Family& family, const std::vector<fs::path>& dirs, const fs::path& base) {
  fs::path last_full = base;
  for (const auto& [name, dir] : discover_variants(dirs)) {
    const Variant& v = family.add(name, dir, last_full);
    if (!v.checkpoint->is_adapter() && !v.checkpoint->is_delta()) last_full = v.checkpoint->dir();
  }
  std::vector<fs::path> bases;
  for (const Variant& v : family.variants())
    if (!v.checkpoint->base_dir().empty()) bases.push_back(v.checkpoint->base_dir());  // an adapter's or a delta's
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
