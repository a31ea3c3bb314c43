#pragma once
// A sweep config on the simulated clock: every (strategy, rate, repeat) served on a simulated device
// (runtime/sim_backend.h) from the variants' config.json files and a device profile, by the one
// Engine, reported through the same events as run_sweep — so the
// recorder, the bench table, the reports and the workbench's charts take simulated runs as they
// take served ones (their run config says "clock": "simulated" and names the profile).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/outcome.h"
#include "runtime/host_store.h"
#include "serving/sim_family.h"
#include "serving/strategy.h"
#include "serving/sweep_run.h"
#include "sim/device_profile.h"
#include "sim/model_shapes.h"

namespace mosaic {

// A workload served by a strategy on a simulated device: the engine's own scheduler, runtime and
// miss policy decide every step over `store` (sim_store(family)), as when serving; nothing is
// computed, each step is priced by the cost model (sim/step_cost.h) from the model's shapes and
// `device`, swaps and expert loads at its host link's rate. Each token's experts are drawn per
// (request, position, layer) from `seed` (sim/routing_model.h: uniform top-k for concentration 0,
// else a routing model's per-prompt skew), so a recomputed token routes as it did and a strategy's
// hits depend only on what it keeps resident. Records in workload order, times from the run's
// start, `lane` the partition. Throws what Deployment's simulated constructor throws.
std::vector<RequestRecord> simulate_workload(const StrategyConfig& strategy, const HostStore& store, const DeviceProfile& device, HostMemory host,
                                             const std::vector<WorkloadRequest>& workload, std::uint64_t seed, double concentration = 0);

// Ok when every run finished, Cancelled when an event stopped it, Failed with what the strategies
// throw (BudgetError, UnsupportedError for a strategy not simulated) or the subscribers throw.
Outcome<> simulate_sweep(const SweepConfig& config, const SimFamily& family, const DeviceProfile& device, const SweepEvents& events = {});

}  // namespace mosaic
