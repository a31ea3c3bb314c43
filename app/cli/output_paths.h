#pragma once
// Outputs never land on inputs: an output path that is one of a command's inputs, or lies inside
// an input folder (a checkpoint), is refused before anything is read or written.
#include <filesystem>
#include <string>
#include <vector>

namespace mosaic::cli {

// Throws InvalidArgument naming `flag` and the input it would overwrite. Empty paths are ignored.
void refuse_output_over_inputs(const std::filesystem::path& out, const std::string& flag,
                               const std::vector<std::filesystem::path>& inputs);

}  // namespace mosaic::cli
