#pragma once
// Which checkpoints a list of folders names, as every front end reads it (command line, workbench,
// sweep configs): a folder holding config.json is a variant, named by the folder; any other folder is
// a family whose checkpoint subfolders are its variants, in name order.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "model/family.h"

namespace mosaic {

// Throws MissingError for a folder that is neither.
std::vector<std::pair<std::string, std::filesystem::path>> discover_variants(const std::vector<std::filesystem::path>& dirs);

// Opens the discovered variants as one family, one by one (so a refusal names the variant). An ESFT
// adapter whose base_model folder is not among them brings its base in (named by its folder), since
// an adapter is served over its base. An adapter that names no base (DeepSeek's) is served over the
// full checkpoint listed last before it (BASE ADAPTER …), else over `base` (--base with --model).
void open_family(Family& family, const std::vector<std::filesystem::path>& dirs, const std::filesystem::path& base = {});

// One discovered variant added as open_family adds each (for a front end that reports each as it
// opens): an adapter that names no base is over `last_full` (the full checkpoint listed last before
// it, else --base), which moves on past each full checkpoint.
const Variant& add_variant(Family& family, const std::string& name, const std::filesystem::path& dir, std::filesystem::path& last_full);

// `--base DIR` beside the folders `dirs`, checked before anything opens: a full checkpoint's folder,
// given where it is used (an ESFT adapter among `dirs` whose expert_cfg.json names no base) and
// nowhere it would be ignored (a full checkpoint, an adapter that names its own). Nothing when empty.
void check_base_option(const std::filesystem::path& base, const std::vector<std::filesystem::path>& dirs);

}  // namespace mosaic
