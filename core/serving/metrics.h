#pragma once
// What a QoS run records per request, and what it sums up per run (Multi-MoE §5: throughput against
// arrival rate, TTFT and turnaround, per-layer hit rates, swap time).
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/generation.h"
#include "runtime/request_stats.h"

namespace mosaic {

// One request of a run: the engine's stats with times counted from the run's start.
struct RequestRecord {
  std::int64_t index = 0;  // position in the workload
  std::string target;
  std::size_t lane = 0;    // the partition that served it (space-sharing); 0 otherwise
  Finish outcome = Finish::Length;
  std::string error;
  RequestStats stats;
  // Traced runs only: where each router choice of each of its tokens went, `token` holding the
  // token's position in the request (the prompt's first).
  std::vector<RoutedExpert> routes;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};
Percentiles percentiles(std::vector<double> values);  // nearest rank; zeros when empty

struct RunSummary {
  std::int64_t requests = 0, failed = 0, output_tokens = 0;
  double makespan_seconds = 0;  // first arrival → last finish
  // Throughput as Multi-MoE measures it: requests completed within the arrival window (from the run's
  // start to the last arrival) per minute of that window, and their tokens per second. What finished
  // after the window is the drain, reported apart: at saturation it grows and throughput stops
  // following the arrival rate.
  double window_seconds = 0, drain_seconds = 0;
  std::int64_t completed_in_window = 0;
  double requests_per_minute = 0, tokens_per_second = 0;
  Percentiles ttft, turnaround, queue_wait, tpot;
  std::vector<double> hit_rate_per_layer;  // hits / (hits + misses); NaN where nothing was routed
  double hit_rate = 0;
  std::int64_t swaps = 0, preemptions = 0;
  double swap_seconds = 0, load_seconds = 0;
  std::uint64_t swap_bytes = 0, load_bytes = 0;
  // Expert loads, and of them those whose bytes were read from disk (host budget): with hits, the
  // three outcomes of a routed expert — on the device, in RAM, on disk.
  std::int64_t loads = 0, disk_loads = 0;
  double disk_seconds = 0;
};

RunSummary summarize(const std::vector<RequestRecord>& records);

// A point of a run's time series, for the dashboard.
struct Sample {
  double t = 0;  // seconds from the start of the run
  std::string name;
  double value = 0;
};

// At every arrival and finish, in time order: "in_system" (arrived and not yet finished) and, at
// finishes, "completed" (finished so far) and "turnaround" (of the request that finished).
std::vector<Sample> time_series(const std::vector<RequestRecord>& records);

}  // namespace mosaic
