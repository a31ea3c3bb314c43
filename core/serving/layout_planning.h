#pragma once
// A consolidated layout planned for a budget or a capacity, the same from every caller (the
// workbench's Session, `mosaic-cli consolidate`, `mosaic-cli … --variants --budget|--capacity`, the
// sweeps' strategies), so that one budget plans one layout everywhere and the file says what it was
// planned under.
#include <cstdint>
#include <optional>
#include <vector>

#include "analysis/family_analysis.h"
#include "analysis/layout.h"
#include "runtime/capacity.h"

namespace mosaic {

struct LayoutAsk {
  // Resident positions: `capacity` where given, else what `budget` holds beside the reserve and room
  // for the non-expert sets `resident_sets` asks (kAutoSets: capacity.h's rule; at most the sets the
  // targets use). One of the two is needed.
  std::optional<std::uint64_t> budget;
  std::optional<std::int64_t> capacity;
  Policy policy = Policy::RoundRobin;
  std::vector<double> shares;  // Weighted: traffic per variant (empty: equal); ignored by the others
  ReserveSpec reserve;
  int resident_sets = kAutoSets;
  std::vector<std::int64_t> layer_caps;  // per layer, at most this many resident (empty: no cap)
};

struct PlannedLayout {
  // With a budget it records the budget and the reserve (items and settings) it was planned under,
  // which is how the workbench and the CLI then serve the file (layout_serving.h's layout_terms).
  Layout layout;
  std::optional<CapacityPlan> capacity;  // the budget's plan, room for the sets kept; nullopt without a budget
};

// The non-expert sets a family's variants use, as far as its folders say without reading a weight:
// one per full checkpoint and delta folder, an adapter its base's unless it stores non-expert tensors
// of its own. A host store (HostStore::sets) also finds full checkpoints whose sets are the same
// bytes; this counts them apart. For a planner that opens no store (`mosaic-cli consolidate`).
int non_expert_sets(const Family& family);

// The plan of `ask.budget` (nullopt without one): the capacity beside the reserve and the room kept
// for the sets `ask.resident_sets` asks, as plan_layout plans it. Priced from the family's shapes
// alone, so a caller can show it before the analysis. Throws what plan_capacity throws.
std::optional<CapacityPlan> budget_plan(const Family& family, int distinct_sets, const LayoutAsk& ask);

// `distinct_sets`: the non-expert sets the served targets use (1 where one set serves all). Throws
// InvalidArgument when neither a budget nor a capacity is given, and what plan_capacity and
// plan_consolidation throw (BudgetError for a budget below the minimum; hybrid and virtual are
// planned elsewhere).
PlannedLayout plan_layout(const Family& family, const FamilyAnalysis& analysis, int distinct_sets, const LayoutAsk& ask);

}  // namespace mosaic
