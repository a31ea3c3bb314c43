#pragma once
// What a QoS run records per request, and what it sums up per run (Multi-MoE §5: throughput against
// arrival rate, TTFT and turnaround, per-layer hit rates, swap time).
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/generation.h"
#include "runtime/runtime.h"

namespace mosaic {

struct RequestRecord {
  std::int64_t index = 0;  // position in the workload
  std::string target;
  std::size_t lane = 0;
  // Seconds from the start of the run.
  double arrival = 0, start = 0, first_token = 0, finish = 0;
  std::int64_t prompt_tokens = 0, output_tokens = 0;
  Finish outcome = Finish::Length;
  std::string error;
  RuntimeCounters counters;

  double queue_wait() const { return start - arrival; }
  double ttft() const { return first_token - arrival; }
  double turnaround() const { return finish - arrival; }
  double swap_seconds() const { return counters.swap_seconds; }
  double tpot() const { return output_tokens > 1 ? (finish - first_token) / static_cast<double>(output_tokens - 1) : 0; }
  std::uint64_t bytes_moved() const { return counters.swap_bytes + counters.total().load_bytes; }
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};
Percentiles percentiles(std::vector<double> values);  // nearest rank; zeros when empty

struct RunSummary {
  std::int64_t requests = 0, failed = 0, output_tokens = 0;
  double makespan_seconds = 0;  // first arrival → last finish
  double requests_per_minute = 0, tokens_per_second = 0;
  Percentiles ttft, turnaround, queue_wait, tpot;
  std::vector<double> hit_rate_per_layer;  // hits / (hits + misses); NaN where nothing was routed
  double hit_rate = 0;
  std::int64_t swaps = 0;
  double swap_seconds = 0, load_seconds = 0;
  std::uint64_t swap_bytes = 0, load_bytes = 0;
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
