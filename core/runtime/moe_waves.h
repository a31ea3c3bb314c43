#pragma once
// A MoE layer's routes once its router has chosen, as the backends that plan on the host run them
// (the CPU's and the simulated device's; the CUDA backend's grouped plan runs its waves on streams):
// the routing plan over the runtime's tables, slot pools and miss policy; each pair's outcome counted
// for its sequence and its route traced where the chunk asked; then wave by wave each load — its
// bytes and seconds charged to the request of the pair that first needed it — the wave's slot groups,
// and the transient loads dropped.
#include <cstdint>
#include <functional>
#include <span>
#include <utility>

#include "runtime/backend.h"
#include "runtime/step_layout.h"

namespace mosaic {

// Copies one load in: the host bytes read, and the seconds it took on the backend's clock.
using WaveLoad = std::function<std::pair<TierRead, double>(const ExpertLoad&)>;
// Runs one wave's slot groups (its loads are in by then).
using WaveRun = std::function<void(const RouteWave&)>;

// `experts`: [tokens, k] the router's choices. Returns the plan that was run.
RoutePlan run_moe_waves(std::int64_t layer, std::span<const std::int64_t> experts, std::int64_t k, const StepLayout& layout, MoeState& state,
                        StepResult& result, const WaveLoad& load, const WaveRun& run);

}  // namespace mosaic
