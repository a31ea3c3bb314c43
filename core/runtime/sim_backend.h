#pragma once
// A device that prices each step instead of computing it: the simulator as a backend under the one
// Engine (issue 62 §1). Its run() takes every token's top-k from a route source (draws seeded by
// request and position, or the routes a real run recorded), hands them to the real plan_routes over
// the runtime's own reroute tables, slot pools and miss policy, and prices the step with the cost
// model (sim/step_cost.h) from the model's shapes and a device profile; a swap or an expert load
// costs its bytes over the profile's host link. What it prices is its own clock
// (Backend::device_seconds), on which the runtime times it and the engine's clock moves. It computes
// no logits: every drawn token is token 0.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/backend.h"
#include "sim/device_profile.h"

namespace mosaic {

// How a simulated device's tokens choose their experts.
class RouteSource {
 public:
  virtual ~RouteSource() = default;
  // Into `out`, the top_k experts of `choices` (every expert, or under masked gating those the
  // token's row reaches) that token `position` of request `request` goes to in `layer`. The same
  // arguments give the same experts, so that a recomputed token routes as it did.
  virtual void route(std::uint64_t request, std::int64_t position, std::int64_t layer, std::span<const int> choices,
                     std::vector<int>& out) = 0;
};

// The routing model's draws (sim/routing_model.h): uniform top-k for concentration 0, else each
// (request, layer) skewed toward experts of its own.
std::shared_ptr<RouteSource> drawn_routes(double concentration, std::uint64_t seed, std::int64_t experts, std::int64_t top_k);

struct SimulatedDevice {
  DeviceProfile profile;
  HostMemory host;  // which of the profile's link rates the copies reach (pinned or pageable)
  std::shared_ptr<RouteSource> routes;
};

// `copy_slowdown`, `compute_slowdown`: space-sharing's (RuntimeConfig), as a MIG slice has them: a
// copy's bytes take that many times as long on its share of the link, but its setup does not; a step's
// kernels take that many times as long, but its host overhead does not. Throws InvalidArgument for a
// device without routes or with a link or memory rate that is not positive.
std::unique_ptr<Backend> make_sim_backend(const HostStore& store, const BackendShape& shape, const SimulatedDevice& device,
                                          double copy_slowdown = 1, double compute_slowdown = 1);

}  // namespace mosaic
