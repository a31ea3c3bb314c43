#pragma once
// A host routing plan (route_plan.h: misses, loads, waves, scratch slots) laid out as the device's
// grouped-pair arrays (kernels/moe_experts.h): every served pair gets a position, the positions of a
// slot's pairs are consecutive, waves follow each other. Groups of many pairs (prefill) are listed
// apart, for cuBLAS; the rest go to the grouped kernels. Plain C++, tested without a GPU.
#include <cstdint>
#include <vector>

#include "runtime/route_plan.h"

namespace mosaic::cuda {

struct PlannedGroup {
  SlotRef slot;
  std::int32_t begin = 0, end = 0;  // positions
};

struct PlannedWave {
  std::vector<ExpertLoad> loads;
  std::vector<PlannedGroup> small, large;
};

struct GroupedPlan {
  std::vector<std::int32_t> pair_at;  // [positions]
  std::vector<std::int32_t> pos_of;   // [pairs]: −1 for a dropped pair
  std::vector<PlannedWave> waves;
};

// Groups of at least `large_from` pairs go to `large`.
GroupedPlan grouped_plan(const RoutePlan& plan, std::int32_t large_from);

}  // namespace mosaic::cuda
