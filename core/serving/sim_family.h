#pragma once
// A family for the simulated clock, known by its config files alone: every variant's config.json,
// and an ESFT adapter's expert_cfg.json or a delta folder's delta.json beside it. No weights need
// exist, so a family too large for this machine (or not downloaded) can be served on a simulated
// device (runtime/sim_backend.h).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "runtime/host_store.h"
#include "sim/model_shapes.h"

namespace mosaic {

struct SimFamily {
  ModelShapes shapes;
  // What a request names, as the engine would (model/variant_folders.h): the listed folders in order,
  // then any base an adapter or delta folder is over that the list lacks (named by its folder).
  std::vector<ConfigTarget> targets;
  std::vector<std::string> names() const;
};

// Reads each folder's config.json, and expert_cfg.json or delta.json where present. An adapter
// that names no base is over the full variant listed last before it, as when serving. Throws what
// discover_variants, load_model_spec, read_expert_cfg and read_delta_config throw; MismatchError
// naming the folder whose config differs from the first's; MissingError for an adapter with no
// base named or listed, or a base_model that is not a folder; UnsupportedError for a base that is
// itself an adapter or delta folder; InvalidArgument for a delta format the expert shapes cannot
// hold. A delta folder's base_sha256 is not checked: the base's weights need not be here.
SimFamily load_sim_family(const std::vector<std::filesystem::path>& dirs);

// The family as a store of shapes (HostStore::of_configs) in its stored dtype.
std::unique_ptr<HostStore> sim_store(const SimFamily& family);

}  // namespace mosaic
