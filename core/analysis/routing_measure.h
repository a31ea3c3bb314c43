#pragma once
// How a variant's router spreads a prompt over its experts: the mean number of distinct experts each
// MoE layer uses among windows of consecutive tokens of a real text, each window run as a prompt of
// its own by the reference forward, and how often consecutive tokens share an expert (the Mixtral
// paper's "first or second choice" repetition, its Table 5). What the simulator's routing model is
// fitted to and checked against (sim/routing_model.h; `mosaic-cli routing`).
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/model.h"

namespace mosaic {

struct RoutingMeasurement {
  std::int64_t tokens = 0, windows = 0;
  std::vector<std::int64_t> layers;  // the MoE layers measured
  std::vector<double> distinct;      // per MoE layer: mean distinct experts in a window
  std::vector<double> overlap;       // per MoE layer: share of consecutive token pairs whose top-k share an expert
  double mean() const;               // of distinct, over the MoE layers
  double mean_overlap() const;       // of overlap, over the MoE layers (0 for one-token windows)
};

// Of `tokens` consecutive tokens' routes, flags [token × expert] (nonzero: routed there), how many
// neighbouring pairs (t, t + 1) share at least one expert.
std::int64_t shared_neighbours(std::span<const char> routed, std::int64_t tokens, std::int64_t experts);

// Windows of `tokens` ids, at most `max_windows` of them spread evenly over `ids`. Throws
// InvalidArgument when `ids` holds less than one window or `tokens` is below 1.
RoutingMeasurement measure_routing(const Model& model, std::span<const std::int64_t> ids, std::int64_t tokens, std::int64_t max_windows);

}  // namespace mosaic
