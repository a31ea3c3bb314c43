#pragma once
// Writing a derived checkpoint folder (a merge, a delta, an expanded delta) all or nothing.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/safetensors.h"

namespace mosaic {

// Writes `out`: the files of the folder `source` other than weights and an adapter's or a delta's
// description (so config, tokenizer, generation config), `extra_files` (name → text), and one
// model.safetensors with `metadata`, all in a temporary folder renamed into place. `out` must not
// exist or be an empty folder (InvalidArgument); IoError when it cannot be written. A failure
// leaves nothing behind.
void write_checkpoint_folder(const std::filesystem::path& out, const std::filesystem::path& source, const std::vector<TensorEntry>& entries,
                             const TensorSource& tensors, const std::map<std::string, std::string>& metadata = {{"format", "pt"}},
                             const std::map<std::string, std::string>& extra_files = {});

}  // namespace mosaic
