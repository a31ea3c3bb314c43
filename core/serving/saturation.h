#pragma once
// Arrival rates chosen from measured service (a sweep config's "rates": {"saturation": …}). Before
// a sweep's runs each strategy serves a burst — every request arriving at once — and the requests
// it completes per second of that burst are its saturation rate. The sweep's rates then run
// geometrically from `from` × the slowest strategy's saturation rate to `to` × the fastest's, so
// every strategy's sweep crosses its own saturation and shows its ridge (Multi-MoE's Figure 4),
// and strategies run at the same rates, so they compare point by point. A strategy stops at the
// first rate that reaches `to` × its own saturation rate: past it, its queue only grows, and a run
// of the fastest strategy's rates would take the slowest one ages.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "serving/metrics.h"
#include "serving/sweep.h"
#include "serving/workload.h"

namespace mosaic {

// A strategy's burst: its rate is the requests that finished in the middle half of the burst's
// finishes over the time they took, leaving out the ramp (the first prompts) and the tail (the
// last requests, decoded in a shrinking batch) that no steady load has.
struct SaturationProbe {
  std::string strategy;
  std::size_t requests = 0;  // in the burst
  double seconds = 0;        // its first arrival → its last finish
  double rate_per_s = 0;  // the saturation rate
};

// How many requests a strategy's burst holds: `probe_requests` when given, else enough to fill
// every partition's batch (max_sequences) four times, at least 32 and at most 4096, so the steady
// state of continuous batching is what gets measured.
std::size_t burst_size(const SaturationRates& spec, std::int64_t max_sequences, std::size_t partitions);

// The burst: `n` requests drawn as the sweep's workloads are (targets, skew, lengths), all
// arriving at 0, seeded apart from every repeat's workload.
std::vector<WorkloadRequest> burst_workload(const SweepConfig& config, const std::vector<std::string>& targets, std::int64_t vocab_size,
                                            std::size_t n);

// Throws InvalidArgument naming the strategy when a request failed (a burst that errors measures nothing).
SaturationProbe saturation_probe(const std::string& strategy, const std::vector<RequestRecord>& records);

// The sweep's rates from every strategy's probe. Throws InvalidArgument when a rate would ask for
// more requests in a run than a run holds (rate × duration_seconds), saying to shorten the run.
std::vector<double> saturation_sweep_rates(const SaturationRates& spec, double duration_seconds,
                                           const std::vector<SaturationProbe>& probes);

// The grid's rates a strategy runs: those below `to` × its saturation rate, and the first at or past it.
std::vector<double> strategy_rates(const std::vector<double>& grid, const SaturationRates& spec, const SaturationProbe& probe);

// What a run records of how its rate was chosen: every probe, in strategy order, as
// {"strategy", "rate_per_s", "requests", "seconds"}.
nlohmann::json saturation_json(const std::vector<SaturationProbe>& probes);

}  // namespace mosaic
