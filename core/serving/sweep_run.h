#pragma once
// Runs a sweep config on an opened family: every (strategy, arrival rate, repeat) served with its
// workload and recorded to SQLite (requests as they finish, the run's time series, its status).
// The bench command prints from the events; the workbench charts them live.
#include <cstdint>
#include <functional>
#include <string>

#include "analysis/family_analysis.h"
#include "runtime/host_store.h"
#include "serving/metrics.h"
#include "serving/sweep.h"
#include "store/recorder.h"

namespace mosaic {

struct SweepRun {
  std::string strategy;
  double rate = 0;  // requests/s (a trace's own rate when one is replayed)
  int repeat = 0;
  std::int64_t run_id = 0;
};

struct SweepEvents {
  std::function<void(const SweepRun&, std::size_t requests)> run_started;
  // After each finished request (one thread at a time); returning false stops the sweep.
  std::function<bool(const SweepRun&, const RequestRecord&, std::size_t done, std::size_t total)> request_finished;
  std::function<void(const SweepRun&, const RunSummary&, bool stopped)> run_finished;
};

// Returns false when stopped (the interrupted run is recorded as "stopped"). Throws what the
// strategies throw (BudgetError for a budget a strategy cannot fit), and IoError from the recorder.
bool run_sweep(const SweepConfig& config, const Family& family, const HostStore& store, const FamilyAnalysis& analysis,
               Recorder& recorder, const SweepEvents& events = {});

}  // namespace mosaic
