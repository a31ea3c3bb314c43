#include "runtime/cuda/grouped_plan.h"

namespace mosaic::cuda {

GroupedPlan grouped_plan(const RoutePlan& plan, std::int32_t large_from) {
  GroupedPlan out;
  out.pos_of.assign(plan.outcome.size(), -1);
  for (const RouteWave& wave : plan.waves) {
    PlannedWave w;
    w.loads = wave.loads;
    for (const SlotGroup& g : wave.groups) {
      const auto begin = static_cast<std::int32_t>(out.pair_at.size());
      for (std::int64_t p : g.pairs) {
        out.pos_of[static_cast<std::size_t>(p)] = static_cast<std::int32_t>(out.pair_at.size());
        out.pair_at.push_back(static_cast<std::int32_t>(p));
      }
      const PlannedGroup planned{g.slot, begin, static_cast<std::int32_t>(out.pair_at.size())};
      (planned.end - planned.begin >= large_from ? w.large : w.small).push_back(planned);
    }
    out.waves.push_back(std::move(w));
  }
  return out;
}

}  // namespace mosaic::cuda
