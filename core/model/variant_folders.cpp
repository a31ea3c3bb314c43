#include "model/variant_folders.h"

#include <algorithm>
#include <optional>
#include <system_error>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/path_identity.h"
#include "common/text_file.h"
#include "model/delta_config.h"
#include "model/esft_adapter.h"

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

const Variant& add_variant(Family& family, const std::string& name, const fs::path& dir, fs::path& last_full) {
  const Variant& v = family.add(name, dir, last_full);
  if (!v.checkpoint->is_adapter() && !v.checkpoint->is_delta()) last_full = v.checkpoint->dir();
  return v;
}

void open_family(Family& family, const std::vector<fs::path>& dirs, const fs::path& base) {
  fs::path last_full = base;
  for (const auto& [name, dir] : discover_variants(dirs)) add_variant(family, name, dir, last_full);
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

void check_base_option(const fs::path& base, const std::vector<fs::path>& dirs) {
  if (base.empty()) return;
  const std::string what = base.string();
  const auto folder = is_folder(base);
  if (!folder) throw MissingError("--base", what, "does not exist", "give the folder of the full checkpoint the adapter was made from");
  if (!*folder || is_folder(base / "config.json") != false)
    throw InvalidArgument("--base", what, *folder ? "is not a checkpoint folder (it holds no config.json)" : "is a file, not a folder",
                          "give the folder of the full checkpoint the adapter was made from");
  for (const char* own : {kExpertCfgFile, kDeltaCfgFile})
    if (is_folder(base / own).has_value())
      throw InvalidArgument("--base", what, std::string("is itself built on a base (it holds ") + own + ")", "give the full checkpoint the adapter was made from");
  // Used only by an adapter that names no base and has no full checkpoint listed before it (the one
  // it is otherwise served over, as open_family does).
  std::string ignored_for;  // why --base would be ignored, for the refusal below
  bool full_before = false;
  for (const auto& [name, dir] : discover_variants(dirs)) {
    if (is_folder(dir / "config.json") != false) return;  // not a checkpoint: opening it says so
    if (is_folder(dir / kDeltaCfgFile).has_value()) continue;  // over the base its delta.json names
    if (!is_folder(dir / kExpertCfgFile).has_value()) {
      full_before = true;
      if (ignored_for.empty()) ignored_for = dir.string() + " is a full checkpoint, served as it is";
      continue;
    }
    nlohmann::json cfg;
    try {
      cfg = nlohmann::json::parse(read_text_file(dir / kExpertCfgFile));
    } catch (const nlohmann::json::exception&) {
      return;  // malformed: opening the adapter says how
    }
    const auto base_model = cfg.is_object() ? cfg.find("base_model") : cfg.end();
    const bool names_base = base_model != cfg.end() && base_model->is_string() && !base_model->get<std::string>().empty();
    if (!names_base && !full_before) return;  // used
    ignored_for = names_base ? (dir / kExpertCfgFile).string() + " names the adapter's base (base_model), which is the one served over"
                             : dir.string() + " is served over the full checkpoint listed before it";
  }
  throw InvalidArgument("--base", what, "is given, but " + (ignored_for.empty() ? std::string("no ESFT adapter needs it") : ignored_for),
                        "drop --base");
}

}  // namespace mosaic
