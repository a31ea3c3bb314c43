#include "serving/sim_family.h"

#include <algorithm>

#include "common/error.h"
#include "common/path_identity.h"
#include "common/text_file.h"
#include "model/delta_config.h"
#include "model/variant_folders.h"
#include "model/weight_names.h"

namespace fs = std::filesystem;

namespace mosaic {
std::vector<std::string> SimFamily::names() const {
  std::vector<std::string> out;
  for (const ConfigTarget& t : targets) out.push_back(t.name);
  return out;
}

SimFamily load_sim_family(const std::vector<fs::path>& dirs) {
  SimFamily f;
  std::vector<fs::path> folders;  // per target
  std::vector<fs::path> bases;    // per target: the folder it is over (empty: a full variant)
  fs::path last_full;
  auto add = [&](const std::string& name, const fs::path& dir) -> ConfigTarget& {
    ModelShapes shapes = load_model_shapes(dir / "config.json");
    if (f.targets.empty()) {
      f.shapes = std::move(shapes);
    } else if (const auto d = first_difference(f.shapes.spec, shapes.spec)) {
      throw MismatchError((dir / "config.json").string(), *d, "differs from the first variant's config (" + f.targets.front().name + ")",
                          "a family's variants share one architecture");
    }
    folders.push_back(dir);
    bases.emplace_back();
    return f.targets.emplace_back(ConfigTarget{.name = name});
  };
  for (const auto& [name, dir] : discover_variants(dirs)) {
    ConfigTarget& t = add(name, dir);
    fs::path& base = bases.back();
    if (file_present(dir / kExpertCfgFile)) {
      const fs::path file = dir / kExpertCfgFile;
      t.adapter = read_expert_cfg(file, f.shapes.spec);
      if (!t.adapter->base_model.empty()) {
        base = dir / t.adapter->base_model;
      } else if (!last_full.empty()) {
        base = last_full;
      } else {
        throw MissingError(file.string(), "base_model", "is absent, and no full variant is listed before the adapter",
                           "list the base before the adapter, or add \"base_model\": \"../base\" to expert_cfg.json");
      }
    } else if (file_present(dir / kDeltaCfgFile)) {
      const DeltaConfig cfg = read_delta_config(dir / kDeltaCfgFile);
      for (const ExpectedTensor& x : expected_tensors(f.shapes.spec))
        if (x.is_expert() && x.expert == 0)
          check_format(cfg.format, x.shape.at(0), x.shape.at(1), (dir / kDeltaCfgFile).string() + ": " + x.name);
      t.delta = cfg.format;
      base = dir / cfg.base_model;
    } else {
      last_full = dir;
    }
  }
  // Each base: a listed full variant, or brought in by its folder.
  const std::size_t listed = f.targets.size();
  for (std::size_t i = 0; i < listed; ++i) {
    if (bases[i].empty()) continue;
    const fs::path base = canonical_or_self(bases[i]);
    const std::string field_at = (folders[i] / (f.targets[i].adapter ? kExpertCfgFile : kDeltaCfgFile)).string();
    std::size_t b = 0;
    while (b < f.targets.size() && canonical_or_self(folders[b]) != base) ++b;
    if (b == f.targets.size()) {
      if (!fs::is_directory(base))
        throw MissingError(field_at, "base_model", "names " + base.string() + ", which is not a folder",
                           "put the base checkpoint's config.json there, or correct base_model");
      std::string name = base.filename().string();
      const std::vector<std::string> names = f.names();
      while (std::find(names.begin(), names.end(), name) != names.end()) name += "-base";
      add(name, base);
    }
    if (!bases[b].empty() || file_present(folders[b] / kExpertCfgFile) || file_present(folders[b] / kDeltaCfgFile))
      throw UnsupportedError(field_at, "base_model", "names " + base.string() + ", which is itself built on a base", "point base_model at a full checkpoint");
    f.targets[i].base = static_cast<int>(b);
  }
  return f;
}

std::unique_ptr<HostStore> sim_store(const SimFamily& family) {
  const DType dtype = family.shapes.stored_bytes == 4 ? DType::F32 : family.shapes.stored_bytes == 8 ? DType::F64 : DType::BF16;
  return HostStore::of_configs(family.shapes.spec, dtype, family.targets);
}

}  // namespace mosaic
