#pragma once
// A strategy (serving/strategy.h) as the simulator's partitions, built from a model's shapes alone:
// the same budget order as the runtime's (one resident set, the pinned experts, the reserve; what
// is left holds more sets, then an lru policy's spares), the same hit rules and swaps. With no
// expert distances to rank positions by, a layout's `capacity` resident positions are spread evenly
// over the layers (serving/config_layout.h: spread_positions); under uniform routing only a layer's
// count matters.
#include <string>
#include <vector>

#include "serving/strategy.h"
#include "serving/simulator.h"

namespace mosaic {

// Throws UnsupportedError for a strategy the simulator does not model (esft, delta, hybrid,
// virtual-experts), InvalidArgument for a single_target not among `names`, BudgetError when a
// partition's budget does not hold what it pins (naming how many experts would fit).
std::vector<SimPartition> simulated_deployment(const StrategyConfig& config, const ModelShapes& shapes,
                                               const std::vector<std::string>& names, const DeviceProfile& device, HostMemory host);

}  // namespace mosaic
