#pragma once
// A layout: which variant's copy of each expert is resident, and why — the file that the runtime,
// the workbench and people exchange (JSON, schema "mosaic.layout/1"):
//   {"schema", "variants": [{"name", "path", "sha256"}], "budget_bytes" (null when the capacity was
//    given), "reserve": [{"name", "bytes", "detail"}], "capacity", "policy", "shares",
//    "resident_per_variant", "map": [[variant index or -1]·E]·L, "rank": [[…]], "distance": [[…]],
//    "deltas": [[count]·E]·L (policy "hybrid" only: how many delta folders' deltas are resident)}
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/capacity.h"
#include "analysis/consolidation.h"
#include "model/family.h"

namespace mosaic {

struct LayoutVariant {
  std::string name;
  std::string path;
  std::string sha256;  // checkpoint_sha256 of the checkpoint the layout was planned from
};

struct Layout {
  static constexpr const char* kSchema = "mosaic.layout/1";
  std::vector<LayoutVariant> variants;
  std::optional<std::uint64_t> budget_bytes;
  std::vector<ReserveItem> reserve;
  ConsolidationPlan plan;

  int variant_index(const std::string& name) const;  // -1 when absent
};

// A layout for `family` from its content hashes and a plan: variants named and located as opened.
Layout make_layout(const Family& family, const std::vector<std::string>& sha256, ConsolidationPlan plan);

// Atomic. Throws IoError.
void save_layout(const Layout& layout, const std::filesystem::path& path);

// Validates the schema, every field's type, and the shapes: map, rank and distance L × E, map entries
// in [-1, variants), resident count ≤ capacity, ranks unique. Throws IoError, FormatError (naming
// the field) or UnsupportedError (another schema version).
Layout load_layout(const std::filesystem::path& path);
// The same from the file's text; `file` names it in errors.
Layout parse_layout(std::string_view text, const std::string& file);

// Checks a layout against the family it is applied to: the same variant names (in any order), the
// same number of layers and experts, no resident copy in a dense layer, and unchanged checkpoints
// (`sha256[i]` is the current hash of family variant i). Returns, for each layout variant, its
// index in the family. Throws MismatchError saying which variant or field disagrees.
std::vector<int> match_layout(const Layout& layout, const Family& family, const std::vector<std::string>& sha256,
                              const std::string& source);

}  // namespace mosaic
