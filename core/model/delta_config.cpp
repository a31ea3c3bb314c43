#include "model/delta_config.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json_int.h"
#include "common/json_text.h"
#include "common/text_file.h"

namespace mosaic {

DeltaConfig read_delta_config(const std::filesystem::path& file) { return parse_delta_config(read_text_file(file), file.string()); }

DeltaConfig parse_delta_config(std::string_view text, const std::string& file) {
  const std::string hint = "write it with `mosaic-cli delta compress`";
  const nlohmann::json j = parse_json(text, file, hint);
  if (!j.is_object()) throw FormatError(file, "", "is not a JSON object", hint);
  check_keys(j, {"schema", "base_model", "base_sha256", "bits", "sparsity", "group"}, file, "", hint);
  auto text_field = [&](const char* key) {
    if (!j.contains(key)) throw MissingError(file, key, "is absent", hint);
    if (!j[key].is_string() || j[key].get<std::string>().empty()) throw FormatError(file, key, "is not a non-empty string", hint);
    return j[key].get<std::string>();
  };
  if (const std::string schema = text_field("schema"); schema != kDeltaSchema)
    throw FormatError(file, "schema", "is '" + schema + "'; this Mosaic reads " + kDeltaSchema, "compress the delta again with this Mosaic");
  DeltaConfig c;
  c.base_model = text_field("base_model");
  c.base_sha256 = text_field("base_sha256");
  if (c.base_sha256.size() != 64 || c.base_sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw FormatError(file, "base_sha256", "is not a SHA-256 in lowercase hex", hint);
  if (!j.contains("bits") || !json_int_in(j["bits"], 2, 4) || (j["bits"].get<std::int64_t>() != 2 && j["bits"].get<std::int64_t>() != 4))
    throw FormatError(file, "bits", "is " + (j.contains("bits") ? j["bits"].dump() : std::string("absent")) + "; it must be 4 or 2", hint);
  c.format.bits = static_cast<int>(j["bits"].get<std::int64_t>());
  const std::string sparsity = text_field("sparsity");
  if (sparsity != "2:4" && sparsity != "none") throw FormatError(file, "sparsity", "is '" + sparsity + "'; it must be 2:4 or none", hint);
  c.format.sparse24 = sparsity == "2:4";
  if (!j.contains("group") || !json_int_in(j["group"], 1, std::int64_t{1} << 30))
    throw FormatError(file, "group", "is " + (j.contains("group") ? j["group"].dump() : std::string("absent")) + "; it must be a positive integer", hint);
  c.format.group = j["group"].get<std::int64_t>();
  if (c.format.sparse24 && c.format.group % 4 != 0) throw FormatError(file, "group", "is " + std::to_string(c.format.group) + "; 2:4 needs a multiple of 4", hint);
  return c;
}

std::string to_delta_json(const DeltaConfig& c) {
  const nlohmann::json j = {{"schema", kDeltaSchema},
                            {"base_model", c.base_model.generic_string()},
                            {"base_sha256", c.base_sha256},
                            {"bits", c.format.bits},
                            {"sparsity", c.format.sparse24 ? "2:4" : "none"},
                            {"group", c.format.group}};
  return j.dump(2) + "\n";
}

}  // namespace mosaic
