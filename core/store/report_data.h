#pragma once
// The numbers a QoS report shows, read back from the SQLite record: one row per run, the runs of a
// (strategy, arrival rate) averaged over repeats — the paper's Figure 4 and Table 2 — and per-layer
// hit rates and per-layer latency by hits per strategy (its Table 1). CSV and JSON writers for all of it.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "store/recorder.h"

namespace mosaic {

struct ReportRun {
  RunInfo info;
  double rate = 0;  // total arrival rate (requests/s) from the run's config; 0 when unknown
  bool external = false;  // a serve run: requests came from clients (HTTP), at no arrival rate of its own
  int repeat = 0;
  // What was run, from the run's recorded config (empty or 0 when an older record lacks it).
  std::int64_t capacity = 0, max_sequences = 0;  // resident experts (layout strategies); sequences at once
  std::string clock;                             // "virtual", "real" or "simulated"
  std::string device;                            // engine runs: "cpu" or "cuda: <GPU>" (records before it: cpu)
  std::string device_profile;                    // simulated runs: the profile's name
  std::string routing;                           // simulated runs: "uniform", or the routing model's file, source and spread
  std::vector<std::string> variants;             // the sweep's variant folders, as written
  double duration_seconds = 0;                   // the arrival window asked for (generated workloads)
  std::vector<RequestRecord> requests;  // as recorded, in workload order
  RunSummary summary;
  // "saturated" for a run that completed nothing within its arrival window (every request finished
  // in the drain), else the status recorded.
  std::string status() const;
};

// The runs of one strategy at one arrival rate, averaged over repeats.
struct ReportPoint {
  std::string strategy;
  double rate = 0;
  bool external = false;  // serve runs: no arrival rate, not plotted against one
  int runs = 0;
  double requests_per_minute = 0, tokens_per_second = 0;
  double ttft_mean = 0, ttft_p90 = 0, turnaround_mean = 0, turnaround_p90 = 0;
  double hit_rate = 0, swap_seconds = 0;
  // How far the repeats disagree: the sample standard deviation of each run's figure (n − 1), NaN
  // for a point of one run. A mean without it cannot tell a difference between strategies from noise.
  double requests_per_minute_sd = NAN, tokens_per_second_sd = NAN, ttft_mean_sd = NAN, turnaround_mean_sd = NAN;
};

struct ReportData {
  std::string database;
  std::vector<ReportRun> runs;
  std::vector<ReportPoint> points;  // by strategy (first-seen order), then rate
  std::vector<std::string> strategies;
  std::map<std::string, std::vector<double>> layer_hit_rates;  // strategy → per layer, over all its runs
  // Multi-MoE's Table 1: strategy → a MoE layer's time in steps where a request ran one token alone,
  // by hits among its top-k ([hits]), over all its runs and MoE layers.
  std::map<std::string, std::vector<LayerTime>> alone_layer_times;
  std::vector<RunInfo> left_out;  // runs that did not finish (aborted, stopped, failed, running), not asked for
};

// An arrival rate as tables print it: two decimals, or two significant digits below 0.1 (0.002
// req/s is not 0.00).
std::string format_rate(double per_second);

// Throws InvalidArgument naming `database` when the runs come from more than one setup (another
// family, or another clock): one report would average their points and state one setup for all.
void check_one_setup(const ReportData& data, const std::string& database);

// `run_ids` empty: every run in the file that finished, or every run at all with `incomplete`
// (their partial numbers would read as complete ones); runs named in `run_ids` are always included.
// Throws InvalidArgument for an id that is not there.
ReportData load_report_data(const Recorder& recorder, const std::vector<std::int64_t>& run_ids,
                            const std::string& database_name, bool incomplete = false);

// runs.csv, points.csv, layer_hit_rates.csv, layer_latency.csv and requests.csv, plus report.json, into `dir`.
void write_report_tables(const ReportData& data, const std::filesystem::path& dir);

}  // namespace mosaic
