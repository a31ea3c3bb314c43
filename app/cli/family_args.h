#pragma once
// How mosaic-cli commands name a family on the command line: checkpoint folders, or folders of
// variant folders, each variant named after its folder.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "model/family.h"

namespace mosaic::cli {

std::vector<std::pair<std::string, std::filesystem::path>> variants_in(const std::vector<std::filesystem::path>& dirs);
// Opens every variant as one family (throws what Family::add throws).
void open_family(Family& family, const std::vector<std::filesystem::path>& dirs);

}  // namespace mosaic::cli
