#pragma once
// Runs a workload against a strategy. Scheduling is FIFO per lane, one request at a time as in the
// paper (space-sharing's partitions are lanes that run side by side); the per-lane loop that takes
// one request and serves it is the seam where a continuous-batching scheduler would take several.
//  - Virtual clock: arrivals on a simulated clock, service times measured on the engine — a request
//    starts at max(arrival, its lane free), so a sweep of high rates finishes in service time.
//  - Real clock: requests arrive on the wall clock and are served live by one thread per lane.
#include <functional>
#include <vector>

#include "serving/metrics.h"
#include "serving/strategy.h"

namespace mosaic {

enum class RunClock { Virtual, Real };

struct RunOptions {
  RunClock clock = RunClock::Virtual;
  // Called once per finished request, in finishing order, from one thread at a time.
  std::function<void(const RequestRecord&)> on_finished;
  // Called after each finished request; returning false stops the run (the rest are not served).
  std::function<bool(std::size_t done, std::size_t total)> progress;
};

// Records in workload order; requests never served because the run stopped are left out.
std::vector<RequestRecord> run_workload(StrategyServer& server, const std::vector<WorkloadRequest>& workload,
                                        const RunOptions& options = {});

}  // namespace mosaic
