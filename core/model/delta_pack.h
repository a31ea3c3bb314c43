#pragma once
// One expert matrix's packed delta as a delta folder stores it (docs/delta-format.md): the tensors
// `N.qweight`, `N.meta` (2:4 only), `N.scales` and `N.zeros` beside the expert weight's name `N`.
#include <cstdint>
#include <string>
#include <vector>

#include "model/delta_codec.h"
#include "model/safetensors.h"

namespace mosaic {

// The header entries of `name`'s pack, in the order a delta folder writes them.
std::vector<TensorEntry> pack_entries(const std::string& name, std::int64_t rows, std::int64_t cols, const DeltaFormat& f);

// The header entries of `name`'s pack as `file` stores them, in pack_entries order, each checked for
// presence, dtype and shape. Throws MissingError or FormatError naming the file and the array.
std::vector<const TensorInfo*> find_pack(const SafetensorsFile& file, const std::string& name, std::int64_t rows, std::int64_t cols,
                                         const DeltaFormat& f);

// Reads `name`'s pack from `file`: find_pack, then the contents checked by check_packed.
PackedDelta read_pack(const SafetensorsFile& file, const std::string& name, std::int64_t rows, std::int64_t cols,
                      const DeltaFormat& f);

}  // namespace mosaic
