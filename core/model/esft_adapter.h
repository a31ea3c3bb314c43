#pragma once
// ESFT adapters: expert_cfg.json ({"experts": {"<layer>": [ids]}, …}) beside safetensors holding the
// tuned tensors. Two spellings of one format (../shared/esft-format.md):
// - DeepSeek's, as deepseek-ai/ESFT saves and releases them: "shared_experts" and
//   "non_expert_modules" flags (the adapter then also holds every MoE layer's shared experts, or every
//   non-expert tensor), no base_model (the base is given beside it), tensors named "layers.N.…"
//   (released) or "model.layers.N.…" (train.py's output), layer keys absolute decoder-layer indices;
// - Mosaic's, which adds "base_model", the folder of the base (relative to the adapter), so that an
//   adapter folder opens on its own.
// Either opens as a Checkpoint: its own tensors from the adapter, every other from the base.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_spec.h"
#include "model/weight_names.h"

namespace mosaic {

struct EsftAdapterConfig {
  std::map<std::int64_t, std::vector<std::int64_t>> experts;  // MoE layer → tuned expert ids
  std::filesystem::path base_model;                            // as written (relative to the adapter); empty: not named
  bool shared_experts = false;      // the adapter tunes every MoE layer's shared experts too
  bool non_expert_modules = false;  // and every non-expert tensor (embeddings, attention, norms, routers, head)
  std::int64_t expert_count() const;
};

inline constexpr const char* kExpertCfgFile = "expert_cfg.json";

// Whether an adapter of `cfg` stores the non-expert tensor `t` of `spec` (what esft.py's to_esft
// leaves trainable beside the listed experts: every MoE layer's shared experts when "shared_experts"
// says so, every other non-expert tensor when "non_expert_modules" does).
bool adapter_stores(const EsftAdapterConfig& cfg, const ModelSpec& spec, const ExpectedTensor& t);

// Throws IoError, FormatError (bad JSON, a layer or expert outside `spec`, a duplicate, a flag that is
// not a boolean), MissingError (no "experts").
EsftAdapterConfig read_expert_cfg(const std::filesystem::path& file, const ModelSpec& spec);
// The same from the file's text; `file` names it in errors.
EsftAdapterConfig parse_expert_cfg(std::string_view text, const std::string& file, const ModelSpec& spec);
// `extra_json`: an object's text whose fields are written alongside (how the experts were chosen).
void write_expert_cfg(const std::filesystem::path& file, const EsftAdapterConfig& cfg, const std::string& extra_json = "{}");
// DeepSeek's spelling, as generate_expert_config.py writes it (Python's json.dump: one line, ", " and
// ": "): every MoE layer of `spec` keyed, no base_model.
std::string deepseek_expert_cfg_text(const EsftAdapterConfig& cfg, const ModelSpec& spec);
// The name an adapter's stored tensor stands for: DeepSeek's released adapters store the inner model's
// state ("layers.N.…"), which ESFT's loader prefixes with "model." (esft.py's legacy renaming).
std::string adapter_tensor_name(const std::string& stored);

}  // namespace mosaic
