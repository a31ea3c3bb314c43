#include "analysis/resident_set.h"

#include <charconv>

#include "common/error.h"
#include "common/json_text.h"
#include "common/text_file.h"

namespace mosaic {

namespace {
const char* const kResidentSetHint = R"(write {"<layer>": [expert ids], …}, e.g. {"0": [1, 4], "3": [0, 2, 7]})";
}

ResidentSet parse_resident_set(std::string_view text, const std::string& source, const ModelSpec& spec) {
  const nlohmann::json j = parse_json(text, source, kResidentSetHint);
  if (!j.is_object()) throw FormatError(source, "", "is not a JSON object of layers and their resident experts", kResidentSetHint);
  const auto layers = spec.num_layers, experts = spec.num_experts;
  ResidentSet out(static_cast<std::size_t>(layers), std::vector<bool>(static_cast<std::size_t>(experts), true));
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    std::int64_t l = -1;
    const auto r = std::from_chars(key.data(), key.data() + key.size(), l);
    const std::string item = "layer \"" + key + "\"";
    if (key.empty() || r.ec != std::errc() || r.ptr != key.data() + key.size() || l < 0 || std::to_string(l) != key)  // "0", not "00" or "-0"
      throw FormatError(source, item, "is not a layer index (0, 1, …)", kResidentSetHint);
    if (l >= layers)
      throw InvalidArgument(source, item, "is past the model's " + std::to_string(layers) + " layers", "number layers from 0 to " + std::to_string(layers - 1));
    if (!spec.is_sparse(l)) throw InvalidArgument(source, item, "is a dense layer: it has no experts to choose among", "name only MoE layers");
    if (!it.value().is_array()) throw FormatError(source, item, "is not a list of expert ids", kResidentSetHint);
    std::vector<bool>& keep = out[static_cast<std::size_t>(l)];
    keep.assign(static_cast<std::size_t>(experts), false);
    std::int64_t kept = 0;
    for (const auto& e : it.value()) {
      if (!e.is_number_integer()) throw FormatError(source, item, "lists " + e.dump() + ", not an expert id", kResidentSetHint);
      const auto id = e.get<std::int64_t>();
      if (id < 0 || id >= experts)
        throw InvalidArgument(source, item, "lists expert " + std::to_string(id) + "; the model's layers have " + std::to_string(experts) + " experts",
                              "use ids 0 to " + std::to_string(experts - 1));
      if (keep[static_cast<std::size_t>(id)]) throw InvalidArgument(source, item, "lists expert " + std::to_string(id) + " twice", "list each expert once");
      keep[static_cast<std::size_t>(id)] = true;
      ++kept;
    }
    if (kept < spec.top_k)
      throw InvalidArgument(source, item,
                            "keeps " + std::to_string(kept) + " expert(s), but the router picks " + std::to_string(spec.top_k) + " per token",
                            "keep at least " + std::to_string(spec.top_k) + " experts in every layer named");
  }
  return out;
}

ResidentSet load_resident_set(const std::filesystem::path& path, const ModelSpec& spec) {
  return parse_resident_set(read_text_file(path, kResidentSetHint), path.string(), spec);
}

}  // namespace mosaic
