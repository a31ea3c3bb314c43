#pragma once
// What the workbench shows of a session, computed here so the GUI only draws: the family's
// variants described, and the distance matrices behind its heatmaps. Plain values.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/outcome.h"
#include "serving/session.h"

namespace mosaic {

struct VariantView {
  std::string name, dir, architecture, dtypes;
  std::int64_t parameters = 0, active_parameters = 0;
  std::uint64_t bytes = 0, non_expert_bytes = 0;
  int adapter_experts = 0;  // > 0: an ESFT adapter tuning this many experts over `base`
  std::string delta;        // a delta folder over `base`: its format ("4-bit, 2:4, group 128"); else empty
  std::string base;
};

struct FamilyView {
  std::vector<VariantView> variants;
  int layers = 0, experts = 0, top_k = 0;
  std::uint64_t bytes_per_expert = 0;
  std::uint64_t host_bytes = 0;  // what the host store holds (each distinct tensor once)
  std::optional<std::uint64_t> host_budget;  // what of it the host tier keeps in RAM; nullopt: all
  bool distances_from_cache = false;
};

FamilyView describe_family(const Session& session);

// The deltas side of the session's layout: whether hybrid can be planned, and under a hybrid layout
// how many of the folders' deltas are resident, at how many positions, in how many packed bytes.
struct DeltaLayoutView {
  bool can_plan = false;
  int folders = 0;                    // delta folders over the base
  std::int64_t resident = 0, total = 0, positions = 0;
  std::uint64_t packed_bytes = 0;     // the resident deltas on the device
};
DeltaLayoutView describe_deltas(const Session& session);

// A matrix to draw as a heatmap. Position and pair maps: rows are layers, columns experts. The
// cross-position map (Multi-MoE's Figure 2): rows are A's positions, columns B's, both in `positions`.
struct MatrixView {
  enum class Kind { Position, Pair, Cross } kind = Kind::Position;
  std::string title, row_label, column_label;
  int rows = 0, columns = 0;
  std::vector<double> values;  // row-major; NaN where undefined (dense layers)
  std::vector<std::pair<std::int64_t, std::int64_t>> positions;  // Cross only
};

// d(l, e) (Position), variants a and b per position (Pair), or a's positions against b's within
// `layer` (all when nullopt) (Cross). Failed (InvalidArgument) for variants that are not two
// different ones of the family.
Outcome<MatrixView> distance_matrix(const Session& session, MatrixView::Kind kind, int a, int b,
                                    std::optional<std::int64_t> layer = std::nullopt);

}  // namespace mosaic
