#include "runtime/moe_waves.h"

namespace mosaic {

RoutePlan run_moe_waves(std::int64_t layer, std::span<const std::int64_t> experts, std::int64_t k, const StepLayout& layout, MoeState& state,
                        StepResult& result, const WaveLoad& load, const WaveRun& run) {
  const auto l = static_cast<std::size_t>(layer);
  const LayerSlots slots{layer, *state.tables[l], *state.pools[l], *state.scratch, *state.store, *state.policy, state.recent};
  RoutePlan plan = plan_routes(slots, experts, k, layout.row);
  count_outcomes(plan, k, layout.sequence, layer, result.counts);
  if (layout.any_traced) trace_routes(plan, slots, experts, k, layout.sequence, layout.first, layout.traced, result.routes);
  for (const RouteWave& wave : plan.waves) {
    for (const ExpertLoad& x : wave.loads) {
      const auto [read, seconds] = load(x);
      result.counts[static_cast<std::size_t>(layout.sequence[static_cast<std::size_t>(x.pair / k)])][l].count_load(read, seconds);
    }
    run(wave);
    for (const ExpertLoad& x : wave.loads)
      if (x.slot.scratch) state.scratch->clear(x.slot.slot);  // transient: dropped after use
  }
  return plan;
}

}  // namespace mosaic
