#pragma once
// A consolidated layout planned from the variants' config.json files alone, for a family too large
// to load (Mixtral-8x7B on a laptop): the budget's capacity from the shapes' bytes and the reserve,
// as analysis/capacity.h prices it, and which variant keeps each resident position by the policy's
// turns. With no weights there are no expert distances: positions are taken in an even spread over
// the MoE layers (the simulated Deployment's order, serving/strategy.cpp), not by similarity.
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/capacity.h"
#include "analysis/consolidation.h"
#include "serving/sim_sweep.h"

namespace mosaic {

// Flattened MoE positions (layer × experts + expert) in the even spread: rank r is expert r div S
// of sparse layer (r + r div S) mod S, so any prefix holds about as many experts in every layer.
std::vector<std::int64_t> spread_positions(const ModelSpec& spec);

struct ConfigLayout {
  CapacityPlan capacity;
  ConsolidationPlan plan;  // distance all NaN, rank the spread's
};

// `budget_bytes` 0: the family's own start (half_resident_budget). Throws BudgetError (the minimum,
// as plan_capacity says it), and InvalidArgument for the medoid
// policy (it needs the copies' distances, hence the weights), hybrid and virtual, or bad shares.
ConfigLayout plan_config_layout(const SimFamily& family, std::uint64_t budget_bytes, Policy policy, const ReserveSpec& reserve = {},
                                std::span<const double> shares = {});

}  // namespace mosaic
