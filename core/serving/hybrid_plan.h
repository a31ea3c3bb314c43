#pragma once
// Hybrid serving of delta folders (DeltaMoE beside Multi-MoE): the base's expert resident at every
// position, and the folders' packed deltas from the least similar position down while the budget
// holds them. A row whose delta is not resident takes the base's copy at its position (a
// consolidated hit, never a load), so the budget decides how many positions are consolidated onto
// the base. The hybrid strategy, the session's hybrid policy and hybrid layout files share this.
#include <cstdint>
#include <vector>

#include "analysis/expert_distance.h"
#include "analysis/layout.h"
#include "runtime/runtime.h"

namespace mosaic {

// The delta folders among the store's targets whose base is `base` (-1: any base in the store).
std::vector<int> delta_folders_over(const HostStore& store, int base = -1);

// The one base the store's delta folders are over. Throws InvalidArgument when no delta folder's base
// is in the store, or when they are over several bases.
int hybrid_base(const HostStore& store);

// Every delta of `folders` (ascending), position by position from the least similar (highest d)
// down, leaving out the `shared` most similar positions.
std::vector<PinnedExpert> deltas_least_similar_first(const HostStore& store, const ExpertDistances& d, const std::vector<int>& folders,
                                                     std::int64_t shared = 0);
// The same over `similar_first`, the MoE positions from the most similar (rank_positions) down.
std::vector<PinnedExpert> deltas_least_similar_first(const HostStore& store, const std::vector<std::int64_t>& similar_first,
                                                     const std::vector<int>& folders, std::int64_t shared = 0);

// What to give a Runtime to plan a hybrid under `budget`: the base everywhere, every delta while room.
RuntimeConfig hybrid_planning_config(const HostStore& store, const ExpertDistances& d, std::uint64_t budget, const ReserveSpec& reserve);

// Per position, how many deltas `pinned` holds there (a hybrid plan's ConsolidationPlan::deltas).
std::vector<std::int64_t> resident_deltas(const HostStore& store, const std::vector<PinnedExpert>& pinned);

// A hybrid layout's plan from what a runtime pinned: ranks and distances from `d`, the base's copy
// at every MoE position, and the deltas resident at each. `base_index` is the base's layout index.
ConsolidationPlan hybrid_plan_from(const HostStore& store, const ExpertDistances& d, int base_index,
                                   const std::vector<PinnedExpert>& pinned);

// The pins a hybrid layout file means: its resident copies, and at each position the first
// plan.deltas of the folders with a delta there, in the layout's variant order. `to_store` maps layout variants to the
// store's targets. Throws MismatchError when a position asks for more deltas than the folders have.
std::vector<PinnedExpert> hybrid_pins(const HostStore& store, const Layout& layout, const std::vector<int>& to_store);

// A hybrid plan as the runtime prices it: the base at every position whatever the budget, and miss
// slots with room for the largest packed delta.
void priced_as_hybrid(CapacityPlan& cap, const HostStore& store, std::int64_t positions, const ReserveSpec& reserve);
// The hybrid's floor: whatever the budget, the base at every MoE position and the reserve.
CapacityPlan hybrid_floor(const HostStore& store, const Family& family, const ReserveSpec& reserve);
// Every packed delta of the folders over `base`, each held delta-only (its base's copy is pinned).
std::uint64_t packed_delta_bytes(const HostStore& store, int base);

}  // namespace mosaic
