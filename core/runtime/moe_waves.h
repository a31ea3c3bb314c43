#pragma once
// A MoE layer's routes once its router has chosen, as every backend that plans on the host runs them
// (the CPU's, the simulated device's, and the CUDA backend's where a layer does not route on the
// device): the routing plan over the runtime's tables, slot pools and miss policy; each pair's
// outcome counted for its sequence and its route traced where the chunk asked; then wave by wave
// the loads — their bytes and seconds charged to the request of the pair that first needed each —
// the wave's slot groups, and the transient loads dropped. A backend supplies the loads and the run.
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "runtime/backend.h"
#include "runtime/step_layout.h"

namespace mosaic {

// A step's tokens as routing sees them: each token's reroute row and sequence, and per sequence
// whether its chunk traces routes and its first token (StepLayout's fields, or the CUDA backend's).
struct RoutedTokens {
  std::span<const int> row, sequence;
  std::span<const std::int64_t> first;
  std::span<const char> traced;
  bool any_traced = false;
};
RoutedTokens routed_tokens(const StepLayout& layout);

// `experts`: [tokens, k] the router's choices. The plan, counted and traced.
RoutePlan plan_moe_layer(std::int64_t layer, std::span<const std::int64_t> experts, std::int64_t k, const RoutedTokens& tokens,
                         MoeState& state, StepResult& result);

// Copies a wave's loads in: for each, the host bytes read and the seconds it took on the backend's clock.
using WaveLoads = std::function<std::vector<std::pair<TierRead, double>>(std::span<const ExpertLoad>)>;
// Runs wave `index`'s slot groups (its loads are in by then).
using WaveRun = std::function<void(const RouteWave& wave, std::size_t index)>;
void run_waves(std::int64_t layer, const RoutePlan& plan, std::int64_t k, std::span<const int> sequence, MoeState& state, StepResult& result,
               const WaveLoads& load, const WaveRun& run);

// Copies one load in: the host bytes read, and the seconds it took.
using WaveLoad = std::function<std::pair<TierRead, double>(const ExpertLoad&)>;
// plan_moe_layer, then run_waves with the loads one at a time. Returns the plan that was run.
RoutePlan run_moe_waves(std::int64_t layer, std::span<const std::int64_t> experts, std::int64_t k, const StepLayout& layout, MoeState& state,
                        StepResult& result, const WaveLoad& load, const WaveRun& run);

}  // namespace mosaic
