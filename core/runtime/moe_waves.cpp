#include "runtime/moe_waves.h"

namespace mosaic {

RoutedTokens routed_tokens(const StepLayout& layout) {
  return {layout.row, layout.sequence, layout.first, layout.traced, layout.any_traced};
}

RoutePlan plan_moe_layer(std::int64_t layer, std::span<const std::int64_t> experts, std::int64_t k, const RoutedTokens& tokens,
                         MoeState& state, StepResult& result) {
  const auto l = static_cast<std::size_t>(layer);
  const LayerSlots slots{layer, *state.tables[l], *state.pools[l], *state.scratch, *state.store, *state.policy, state.recent};
  RoutePlan plan = plan_routes(slots, experts, k, tokens.row);
  count_outcomes(plan, k, tokens.sequence, layer, result.counts);
  if (tokens.any_traced) trace_routes(plan, slots, experts, k, tokens.sequence, tokens.first, tokens.traced, result.routes);
  return plan;
}

void run_waves(std::int64_t layer, const RoutePlan& plan, std::int64_t k, std::span<const int> sequence, MoeState& state, StepResult& result,
               const WaveLoads& load, const WaveRun& run) {
  const auto l = static_cast<std::size_t>(layer);
  for (std::size_t w = 0; w < plan.waves.size(); ++w) {
    const RouteWave& wave = plan.waves[w];
    if (!wave.loads.empty()) {
      const std::vector<std::pair<TierRead, double>> done = load(wave.loads);
      for (std::size_t i = 0; i < wave.loads.size(); ++i)
        result.counts[static_cast<std::size_t>(sequence[static_cast<std::size_t>(wave.loads[i].pair / k)])][l].count_load(done[i].first,
                                                                                                                          done[i].second);
    }
    run(wave, w);
    for (const ExpertLoad& x : wave.loads)
      if (x.slot.scratch) state.scratch->clear(x.slot.slot);  // transient: dropped after use
  }
}

RoutePlan run_moe_waves(std::int64_t layer, std::span<const std::int64_t> experts, std::int64_t k, const StepLayout& layout, MoeState& state,
                        StepResult& result, const WaveLoad& load, const WaveRun& run) {
  RoutePlan plan = plan_moe_layer(layer, experts, k, routed_tokens(layout), state, result);
  run_waves(
      layer, plan, k, layout.sequence, state, result,
      [&](std::span<const ExpertLoad> loads) {
        std::vector<std::pair<TierRead, double>> done;
        for (const ExpertLoad& x : loads) done.push_back(load(x));
        return done;
      },
      run);
  return plan;
}

}  // namespace mosaic
