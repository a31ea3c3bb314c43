#include "model/esft_adapter.h"

#include "common/json_text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/text_file.h"

namespace mosaic {

std::int64_t EsftAdapterConfig::expert_count() const {
  std::int64_t n = 0;
  for (const auto& [layer, ids] : experts) n += static_cast<std::int64_t>(ids.size());
  return n;
}

bool adapter_stores(const EsftAdapterConfig& cfg, const ModelSpec& spec, const ExpectedTensor& t) {
  if (t.is_expert()) return false;
  bool shared = false;
  if (t.layer >= 0 && spec.is_sparse(t.layer) && spec.shared_expert_intermediate > 0) {
    const WeightNames names(spec);
    for (ExpertRole r : {ExpertRole::Gate, ExpertRole::Up, ExpertRole::Down}) shared |= t.name == names.shared_expert(t.layer, r);
    shared |= spec.shared_expert_gated && t.name == names.shared_expert_gate(t.layer);
  }
  return shared ? cfg.shared_experts : cfg.non_expert_modules;
}

EsftAdapterConfig read_expert_cfg(const std::filesystem::path& file, const ModelSpec& spec) {
  return parse_expert_cfg(read_text_file(file), file.string(), spec);
}

EsftAdapterConfig parse_expert_cfg(std::string_view text, const std::string& file, const ModelSpec& spec) {
  nlohmann::json j;
  try {
    j = parse_json_bounded(text, file);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(file, "", std::string("is not valid JSON: ") + e.what());
  }
  const std::string hint = "write {\"experts\": {\"<layer>\": [expert ids]}, \"base_model\": \"../base\"}";
  if (!j.is_object() || !j.contains("experts") || !j["experts"].is_object())
    throw MissingError(file, "experts", "is absent or not an object", hint);
  EsftAdapterConfig cfg;
  if (j.contains("base_model") && !j["base_model"].is_null()) {
    if (!j["base_model"].is_string() || j["base_model"].get<std::string>().empty())
      throw FormatError(file, "base_model", "is not a folder name", "name the base checkpoint's folder, relative to the adapter");
    cfg.base_model = j["base_model"].get<std::string>();
  }
  for (const auto& [key, flag] : {std::pair{"shared_experts", &cfg.shared_experts}, std::pair{"non_expert_modules", &cfg.non_expert_modules}}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_boolean()) throw FormatError(file, key, "is not true or false", "ESFT writes it as a boolean");
    *flag = j[key].get<bool>();
  }
  for (const auto& [key, ids] : j["experts"].items()) {
    std::int64_t layer = -1;
    try {
      std::size_t used = 0;
      layer = std::stoll(key, &used);
      if (used != key.size()) layer = -1;
    } catch (const std::exception&) {
    }
    if (!ids.is_array()) throw FormatError(file, "experts." + key, "is not a list of expert ids", hint);
    if (layer >= 0 && layer < spec.num_layers && !spec.is_sparse(layer) && ids.empty()) continue;  // a dense layer's empty key: nothing tuned
    if (layer < 0 || layer >= spec.num_layers || !spec.is_sparse(layer))
      throw FormatError(file, "experts." + key, "is not an MoE layer of the model (keys are decoder-layer indices; DeepSeek-V2-Lite's run from 1)", hint);
    std::set<std::int64_t> seen;
    for (const auto& id : ids) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= spec.num_experts)
        throw FormatError(file, "experts." + key, "holds " + id.dump() + ", not an expert id below " + std::to_string(spec.num_experts));
      if (!seen.insert(id.get<std::int64_t>()).second)
        throw FormatError(file, "experts." + key, "lists expert " + id.dump() + " twice");
    }
    if (!seen.empty()) cfg.experts[layer].assign(seen.begin(), seen.end());
  }
  return cfg;
}

std::string adapter_tensor_name(const std::string& stored) { return stored.starts_with("layers.") ? "model." + stored : stored; }

std::string deepseek_expert_cfg_text(const EsftAdapterConfig& cfg, const ModelSpec& spec) {
  std::string out = "{\"experts\": {";
  bool first = true;
  for (std::int64_t l = 0; l < spec.num_layers; ++l) {
    if (!spec.is_sparse(l)) continue;
    out += (first ? "\"" : ", \"") + std::to_string(l) + "\": [";
    first = false;
    const auto it = cfg.experts.find(l);
    if (it != cfg.experts.end())
      for (std::size_t i = 0; i < it->second.size(); ++i) out += (i ? ", " : "") + std::to_string(it->second[i]);
    out += "]";
  }
  out += std::string("}, \"shared_experts\": ") + (cfg.shared_experts ? "true" : "false") + ", \"non_expert_modules\": " +
         (cfg.non_expert_modules ? "true" : "false") + "}";
  return out;
}

void write_expert_cfg(const std::filesystem::path& file, const EsftAdapterConfig& cfg, const std::string& extra_json) {
  nlohmann::json j = nlohmann::json::parse(extra_json);
  nlohmann::json experts = nlohmann::json::object();
  for (const auto& [layer, ids] : cfg.experts) experts[std::to_string(layer)] = ids;
  j["experts"] = experts;
  j["base_model"] = cfg.base_model.generic_string();
  if (cfg.shared_experts) j["shared_experts"] = true;
  if (cfg.non_expert_modules) j["non_expert_modules"] = true;
  write_file_atomically(file, [&](std::ostream& out) { out << j.dump(2) << "\n"; });
}

}  // namespace mosaic
