#pragma once
// The one loop of a sweep, whatever serves it (an opened family, run_sweep; a simulated device,
// simulate_sweep): each strategy deployed, its saturation burst where the rates come from one, then
// every (rate, repeat) run with its workload, reported through the sweep's events as requests finish.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/outcome.h"
#include "serving/runner.h"
#include "serving/strategy.h"
#include "serving/sweep_run.h"

namespace mosaic {

struct SweepServer {
  // A strategy's deployment whose runs draw from `seed` (a simulated device's routes; the served
  // ignore it), checked against the sweep's targets by the loop.
  std::function<std::unique_ptr<Deployment>(const StrategyConfig&, std::uint64_t seed)> deploy;
  // Run once on a deployment just checked, before it serves anything measured, with the targets it
  // will serve (the served: one short request each, so no run pays a fresh deployment's first loads).
  std::function<void(const Deployment&, const std::vector<std::string>& targets)> warm_up;
  // A fresh deployment for every run, from the run's seed (the simulated device: a run's routes are
  // its own); else one per strategy for all its runs, as a server keeps one.
  bool per_run = false;
  // Run options beside the loop's events (clock, a shared engine, routes traced).
  RunOptions options;
  // What every run's config records beside the loop's own keys (clock, device, routing, targets).
  std::function<nlohmann::json(const Deployment&)> recorded;
};

// Throws what deploying a strategy and the subscribers throw; Cancelled when an event stopped it.
Outcome<> sweep_loop(const SweepConfig& config, const ModelSpec& spec, const std::vector<WorkloadRequest>& trace, const SweepServer& server,
                     const SweepEvents& events);

}  // namespace mosaic
