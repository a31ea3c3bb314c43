#pragma once
// A fixed set of resident experts per layer (SwapMoE's virtual experts, held still): the router
// chooses only among them (masked gating) and nothing else is ever loaded. Read from JSON,
// {"<layer>": [expert ids], …}; a sparse layer the file does not name keeps all its experts.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_spec.h"

namespace mosaic {

// [layers][experts]: whether the expert is resident (dense layers: all true).
using ResidentSet = std::vector<std::vector<bool>>;

// Throws FormatError (not JSON, a key that is not a layer index, ids that are not integers) or
// InvalidArgument (a layer or expert outside `spec`, a dense layer, an expert listed twice, fewer
// experts than the router picks per token), naming `source` and the layer.
ResidentSet parse_resident_set(std::string_view text, const std::string& source, const ModelSpec& spec);
ResidentSet load_resident_set(const std::filesystem::path& path, const ModelSpec& spec);

}  // namespace mosaic
