#pragma once
// How a variant's router spreads a prompt over its experts: the mean number of distinct experts each
// MoE layer uses among windows of consecutive tokens of a real text, each window run as a prompt of
// its own by the reference forward. What the simulator's routing model is fitted to
// (sim/routing_model.h; `mosaic-cli routing`).
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/model.h"

namespace mosaic {

struct RoutingMeasurement {
  std::int64_t tokens = 0, windows = 0;
  std::vector<std::int64_t> layers;  // the MoE layers measured
  std::vector<double> distinct;      // per MoE layer: mean distinct experts in a window
  double mean() const;               // over the MoE layers
};

// Windows of `tokens` ids, at most `max_windows` of them spread evenly over `ids`. Throws
// InvalidArgument when `ids` holds less than one window or `tokens` is below 1.
RoutingMeasurement measure_routing(const Model& model, std::span<const std::int64_t> ids, std::int64_t tokens, std::int64_t max_windows);

}  // namespace mosaic
