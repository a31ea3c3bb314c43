#pragma once
// Outputs never land on inputs: an output path that is one of a command's inputs (by any name:
// symlink or hard link), or lies inside an input checkpoint folder or an adapter's base folder, is
// refused before anything is read or written. A family folder's own files (a layout beside the
// variants) are not inputs.
#include <filesystem>
#include <string>
#include <vector>

namespace mosaic::cli {

// Throws InvalidArgument naming `flag` and the input it would overwrite. Empty paths are ignored.
void refuse_output_over_inputs(const std::filesystem::path& out, const std::string& flag,
                               const std::vector<std::filesystem::path>& inputs);

}  // namespace mosaic::cli
