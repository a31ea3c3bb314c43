#pragma once
// Runs a sweep config on an opened family: every (strategy, arrival rate, repeat) served with its
// workload, reported through events as it goes. The recorder (store/sweep_recording.h), the bench
// command's table and the workbench's charts all subscribe to the same events.
#include <cstdint>
#include <functional>
#include <string>

#include "analysis/family_analysis.h"
#include "common/outcome.h"
#include "runtime/host_store.h"
#include "serving/metrics.h"
#include "serving/saturation.h"
#include "serving/sweep.h"
#include "serving/workload.h"

namespace mosaic {

class Engine;

struct SweepRun {
  std::string strategy;
  double rate = 0;  // requests/s (a trace's own rate when one is replayed)
  int repeat = 0;
  std::string config_json;  // the run's own settings, with the sweep config as written
  std::int64_t run_id = 0;  // set by a subscriber that records (the recorder's id), else 0
};

struct SweepEvents {
  // A sweep whose rates come from saturation: after every strategy's burst, before the first run.
  std::function<void(const std::vector<SaturationProbe>& probes, const std::vector<double>& rates)> rates_chosen;
  // During a strategy's saturation burst, after each finished request (one thread at a time);
  // returning false stops the sweep before any run.
  std::function<bool(const std::string& strategy, std::size_t done, std::size_t total)> probe_progress;
  std::function<void(SweepRun& run, std::size_t requests)> run_started;
  // After each finished request (one thread at a time); returning false stops the sweep.
  std::function<bool(const SweepRun&, const RequestRecord&, std::size_t done, std::size_t total)> request_finished;
  std::function<void(const SweepRun&, const std::vector<RequestRecord>&, const RunSummary&, bool stopped)> run_finished;
};

// One run's requests: the trace when the sweep replays one (its rate is what it holds), else Poisson
// arrivals at total `rate` over `targets`, seeded by the sweep's seed plus the repeat.
struct SweepWorkload {
  std::vector<WorkloadRequest> requests;
  double rate = 0;
  std::uint64_t seed = 0;
};
SweepWorkload sweep_workload(const SweepConfig& config, const std::vector<std::string>& targets, double rate, int repeat,
                             std::int64_t vocab_size, const std::vector<WorkloadRequest>& trace);

// What only the model can tell of a sweep, checked before any run starts (else a run "finishes"
// with the error inside): prompts and outputs within its context, a trace's ids within its vocabulary.
void check_sweep_workload(const SweepConfig& config, const ModelSpec& spec, const std::vector<WorkloadRequest>& trace);

// Ok when every run finished, Cancelled when a request_finished or probe_progress event stopped it, Failed with what
// the strategies throw (BudgetError for a budget a strategy cannot fit) or the subscribers throw.
// `shared`: one-partition strategies run on this engine (the workbench's), so its other requests
// join their batches.
Outcome<> run_sweep(const SweepConfig& config, const Family& family, const HostStore& store, const FamilyAnalysis& analysis,
                    const SweepEvents& events = {}, Engine* shared = nullptr);

}  // namespace mosaic
