#pragma once
// A layout: which variant's copy of each expert is resident, and why — the file that the runtime,
// the workbench and people exchange (JSON, schema "mosaic.layout/1"):
//   {"schema", "variants": [{"name", "path", "sha256"}], "budget_bytes" (null when the capacity was
//    given), "reserve": [{"name", "bytes", "detail"}], "reserve_spec": {"context_tokens", "requests",
//    "prefill_chunk", "miss_slots", "kv_bytes"} (what sized the reserve; absent in files written
//    before 2026-11-29), "capacity", "policy", "shares",
//    "resident_per_variant", "map": [[variant index or -1]·E]·L, "rank": [[…]], "distance": [[…]],
//    "deltas": [[count]·E]·L (policy "hybrid" only: how many delta folders' deltas are resident),
//    "virtual" (policy "virtual" only): {"counts": [per layer], "initial": [[[variant, expert]…]·L],
//    "staging", "update_every", "decay", "shift", "planner": {what the planner measured}}}
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/capacity.h"
#include "analysis/consolidation.h"
#include "model/family.h"
#include "runtime/pinned_expert.h"

namespace mosaic {

struct LayoutVariant {
  std::string name;
  std::string path;
  std::string sha256;  // checkpoint_sha256 of the checkpoint the layout was planned from
};

// SwapMoE's virtual experts as a layout (policy "virtual", `mosaic-cli plan-virtual`): how many
// experts of each variant each layer keeps resident, the set it starts with, and how the runtime
// changes it (runtime/virtual_experts.h). `plan.map` shows the initial set: at each position the
// first variant whose copy is in it.
struct VirtualLayout {
  std::vector<std::int64_t> counts;  // [layers]: resident experts per variant; 0 in dense layers
  std::vector<std::vector<std::pair<int, std::int64_t>>> initial;  // [layers]: (variant index, expert)
  std::int64_t staging = 1, update_every = 8;
  double decay = 0.9, shift = 0.25;
  // What the planner measured on its calibration text, as mean NLL per token (nats).
  struct Planner {
    std::int64_t calibration_tokens = 0;
    double full_nll = 0;           // every expert resident
    double objective = 0;          // Σ over layers of the NLL rise with that layer alone at its count
    std::int64_t uniform_count = 0;  // the most experts per layer that the same bytes hold uniformly
    double uniform_objective = 0;
    double planned_nll = 0, uniform_nll = 0;  // every layer at its count at once
    std::vector<std::vector<double>> loss;    // [layers][count − first_count]: the per-layer rises (dense: empty)
    std::int64_t first_count = 0;             // the smallest count measured (top-k)
  } planner;
};

struct Layout {
  static constexpr const char* kSchema = "mosaic.layout/1";
  std::vector<LayoutVariant> variants;
  std::optional<std::uint64_t> budget_bytes;
  std::vector<ReserveItem> reserve;
  // The settings `reserve` was sized from: a layout is served with them within its budget, by the
  // workbench and the CLI alike (serving/layout_serving.h). nullopt: a file from before they were kept.
  std::optional<ReserveSpec> reserve_spec;
  ConsolidationPlan plan;
  std::optional<VirtualLayout> virtual_experts;  // policy "virtual" only

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

// The layout's resident copies as pinned experts; `to_store[i]` is layout variant i's target.
std::vector<PinnedExpert> pinned_from_layout(const Layout& layout, const std::vector<int>& to_store);

}  // namespace mosaic
