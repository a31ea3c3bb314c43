#pragma once
// A delta folder's description (delta.json, docs/delta-format.md): which base its packed experts
// are added to, and how they were packed. Like an ESFT adapter's expert_cfg.json, `base_model` names
// the base's folder relative to the delta folder.
#include <filesystem>
#include <string>
#include <string_view>

#include "model/delta_codec.h"

namespace mosaic {

struct DeltaConfig {
  std::filesystem::path base_model;  // as written (relative to the delta folder)
  std::string base_sha256;           // checkpoint_sha256 of the base the deltas were taken from
  DeltaFormat format;
};

inline constexpr const char* kDeltaCfgFile = "delta.json";
inline constexpr const char* kDeltaSchema = "mosaic.delta/1";

// Throws IoError, FormatError (bad JSON, a field of the wrong type or out of range, another schema),
// MissingError (a required field absent).
DeltaConfig read_delta_config(const std::filesystem::path& file);
DeltaConfig parse_delta_config(std::string_view text, const std::string& file);
std::string to_delta_json(const DeltaConfig& c);

}  // namespace mosaic
