#pragma once
// A host routing plan (route_plan.h: misses, loads, waves, scratch slots) laid out as the device's
// grouped-pair arrays (kernels/moe_experts.h): every served pair gets a position, the positions of a
// slot's pairs are consecutive, waves follow each other. Groups of many pairs (prefill) are listed
// apart, for cuBLAS; the rest go to the grouped kernels. Slots whose experts add a packed delta over
// shared base matrices form bundles: DeltaMoE's decoupled compute runs the base's GEMMs once over
// the bundle's positions, then each delta over its own. Plain C++, tested without a GPU.
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/route_plan.h"

namespace mosaic::cuda {

struct PlannedGroup {
  SlotRef slot;
  std::int32_t begin = 0, end = 0;  // positions
  bool delta = false;               // a packed Δ is added over the dense matrices' product
};

// Groups over the same dense matrices, one of them at least with a delta; their positions are
// [begin, end), group after group.
struct PlannedBundle {
  std::int32_t begin = 0, end = 0;
  std::vector<PlannedGroup> groups;
};

struct PlannedWave {
  std::vector<ExpertLoad> loads;
  std::vector<PlannedGroup> small, large;
  std::vector<PlannedBundle> bundles;
};

struct GroupedPlan {
  std::vector<std::int32_t> pair_at;  // [positions]
  std::vector<std::int32_t> pos_of;   // [pairs]: −1 for a dropped pair
  std::vector<PlannedWave> waves;
};

// What a slot serves once the step's loads so far are in: its dense matrices (equal keys: the same
// tensors) and whether a packed delta goes over them.
struct SlotServes {
  std::array<std::int32_t, 3> dense{-1, -1, -1};
  bool delta = false;
};
// A slot, and the expert a wave of this step loaded into it last (−1: none yet) → what it serves.
using ServesOf = std::function<SlotServes(SlotRef, std::int32_t loaded)>;

// Groups of at least `large_from` pairs go to `large`. Without `serves`, no group has a delta.
GroupedPlan grouped_plan(const RoutePlan& plan, std::int32_t large_from, const ServesOf& serves = {});

}  // namespace mosaic::cuda
