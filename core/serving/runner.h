#pragma once
// Runs a workload against a deployment: every request submitted to the engine of its partition at
// once, each with its arrival time, and served by continuous batching.
//  - Virtual clock: arrivals on a simulated clock that moves on by the engine's measured work, so a
//    sweep of high rates finishes in service time; partitions (space-sharing) run one after another,
//    each on the whole machine.
//  - Real clock: requests arrive on the wall clock; partitions run side by side.
#include <functional>
#include <vector>

#include "runtime/engine.h"
#include "serving/metrics.h"
#include "serving/strategy.h"
#include "serving/workload.h"

namespace mosaic {

// Simulated: as virtual, on a deployment on a simulated device (serving/sim_sweep.h), whose priced
// time is what the clock moves by.
enum class RunClock { Virtual, Real, Simulated };

struct RunOptions {
  RunClock clock = RunClock::Virtual;
  // Called once per finished request, in finishing order, from one thread at a time.
  std::function<void(const RequestRecord&)> on_finished;
  // Called after each finished request; returning false stops the run (the rest are cancelled and
  // left out of the records).
  std::function<bool(std::size_t done, std::size_t total)> progress;
  // Serve a one-partition deployment on this engine (shared with whatever else submits to it, such
  // as the workbench's chat) instead of one of the run's own. Its runtime, scheduler and clock are
  // the deployment's for the run and restored afterwards.
  Engine* engine = nullptr;
  // Record each request's routes (RequestRecord::routes): every token's choices per layer.
  bool trace_routes = false;
};

// Records in workload order, times from the start of the run. Throws InvalidArgument for a target
// the deployment does not serve, before anything is submitted.
std::vector<RequestRecord> run_workload(const Deployment& deployment, const std::vector<WorkloadRequest>& workload,
                                        const RunOptions& options = {});

}  // namespace mosaic
