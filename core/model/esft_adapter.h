#pragma once
// ESFT adapters in ESFT's layout: expert_cfg.json ({"experts": {"<layer>": [ids]}, …}) beside a
// model.safetensors holding only the tuned experts. Mosaic adds "base_model", the folder of the
// checkpoint the adapter tunes (relative to the adapter), so that an adapter folder opens as a
// Checkpoint: the listed experts from the adapter, every other tensor from the base.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_spec.h"

namespace mosaic {

struct EsftAdapterConfig {
  std::map<std::int64_t, std::vector<std::int64_t>> experts;  // MoE layer → tuned expert ids
  std::filesystem::path base_model;                            // as written (relative to the adapter)
  std::int64_t expert_count() const;
};

inline constexpr const char* kExpertCfgFile = "expert_cfg.json";

// Throws IoError, FormatError (bad JSON, a layer or expert outside `spec`, a duplicate),
// MissingError (no "experts" or "base_model").
EsftAdapterConfig read_expert_cfg(const std::filesystem::path& file, const ModelSpec& spec);
// The same from the file's text; `file` names it in errors.
EsftAdapterConfig parse_expert_cfg(std::string_view text, const std::string& file, const ModelSpec& spec);
// `extra_json`: an object's text whose fields are written alongside (how the experts were chosen).
void write_expert_cfg(const std::filesystem::path& file, const EsftAdapterConfig& cfg, const std::string& extra_json = "{}");

}  // namespace mosaic
