// bench --config: the QoS sweep (strategies × arrival rates × repeats) on one family, every request
// recorded to SQLite, a summary table printed per run (latencies in ms), or with --json one JSON
// document at the end; a progress line on a terminal either way.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "analysis/family_analysis.h"
#include "cli/analyzed.h"
#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/serving_args.h"
#include "model/variant_folders.h"
#include "common/error.h"
#include "runtime/matmul_yardstick.h"
#include "runtime/threads.h"
#include "serving/strategy.h"
#include "serving/sweep.h"
#include "serving/sweep_run.h"
#include "serving/sim_sweep.h"
#include "store/recorder.h"
#include "store/report_data.h"
#include "store/run_json.h"
#include "store/sweep_recording.h"

#include <chrono>

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

// "[#######.............]  35/100  consolidated @ 2 req/s" on a terminal; nothing in a log.
void draw_progress(std::size_t done, std::size_t total, const std::string& label) {
  if (!::isatty(STDERR_FILENO)) return;
  const int width = 30, filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[%s%s] %4zu/%-4zu %s   ", std::string(static_cast<std::size_t>(filled), '#').c_str(),
               std::string(static_cast<std::size_t>(width - filled), '.').c_str(), done, total, label.c_str());
  if (done == total) std::fprintf(stderr, "\n");
}

// Where the whole sweep stands: "run 3/56, 1m12s, about 4m left" (the estimate from the runs done).
struct SweepProgress {
  std::size_t runs = 0, started = 0;
  MatmulRate compute_before, stream_before;  // --yardstick: the machine's rates before this run
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now(), run_t0 = t0;
  std::string label(const SweepRun& run) const {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double done_time = std::chrono::duration<double>(run_t0 - t0).count();  // the runs before this one
    auto clock = [](double s) {
      const auto m = static_cast<long long>(s) / 60, sec = static_cast<long long>(s) % 60;
      return (m > 0 ? std::to_string(m) + "m" : std::string()) + std::to_string(sec) + "s";
    };
    std::string out = "run " + std::to_string(started) + "/" + std::to_string(std::max(runs, started)) + ", " + clock(elapsed);
    if (started > 1 && runs >= started) out += ", about " + clock(done_time / static_cast<double>(started - 1) * static_cast<double>(runs - started + 1)) + " left";
    return out + "  " + run.strategy + " @ " + std::to_string(run.rate).substr(0, 5) + " req/s";
  }
};

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Run a QoS sweep (strategies × arrival rates × repeats) and record it to SQLite");
  struct Opts { fs::path config, db = "mosaic-runs.sqlite"; int threads = 0; bool json = false, yardstick = false; std::string device, host_budget, cpu_weights; };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->config, "sweep config (mosaic.sweep/1), e.g. sample_configs/paper-qos.json")->required();
  cmd->add_option("--db", o->db, "SQLite file to record into (created or migrated)")->default_val("mosaic-runs.sqlite");
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--device", o->device, "cpu | cuda: serve every strategy on this device, whatever the config's \"device\" says");
  cmd->add_option("--host-budget", o->host_budget, "the host tier's budget (e.g. 16GiB, or all), whatever the config's \"host_budget\" says");
  cmd->add_option("--cpu-weights", o->cpu_weights,
                  "stored | fp32 | mapped: how the CPU backend holds every strategy's weights, whatever the config's \"cpu_weights\" says");
  cmd->add_flag("--json", o->json, "print the runs' summaries as one JSON document (times in seconds) instead of the table");
  cmd->add_flag("--yardstick", o->yardstick,
                "before and after each run, time LibTorch's fp32 matmul on this machine, in cache (GFLOP/s) and streaming its weights "
                "from memory (GB/s), printed with the run: the virtual clock charges measured compute, so runs compare only while the "
                "machine's speed holds");
  cmd->callback([o] {
    configure_threads(o->threads);
    SweepConfig config = load_sweep_config(o->config);
    // Said before the family is read: reading a large one takes minutes.
    if (!o->device.empty()) set_sweep_device(config, checked_device(o->device));
    if (!o->host_budget.empty()) set_sweep_host_budget(config, host_budget_bytes(o->host_budget));
    if (!o->cpu_weights.empty()) set_sweep_cpu_weights(config, checked_cpu_weights(o->cpu_weights));
    if (config.clock != RunClock::Simulated)  // whichever override was given
      if (const auto why = device_unavailable(config.device))
        throw DeviceError(o->config.string(), "field 'device'", *why, "run it with --device cpu, or on a machine with an NVIDIA GPU");
    // Opened first: a read-only path, a full disk or a file that is not a record is said at once,
    // not after the family has been read and analysed.
    std::vector<fs::path> inputs = config.variants;  // the record lands on none of what the sweep reads
    inputs.push_back(o->config);
    if (!config.trace.empty()) inputs.push_back(config.trace);
    if (config.clock == RunClock::Simulated) inputs.push_back(config.device_profile);
    if (!config.routing.empty()) inputs.push_back(config.routing);
    for (const StrategyConfig& sc : config.strategies)
      if (!sc.calibration.empty()) inputs.push_back(sc.calibration);
    check_output(o->db, "--db", inputs, OutputKind::Database);
    std::error_code ec;
    const bool db_existed = fs::exists(o->db, ec) || ec;
    std::optional<Recorder> recorder(std::in_place, o->db);
    recorder->check_writable();
    auto results = std::make_shared<nlohmann::ordered_json>(nlohmann::ordered_json::array());
    // The strategy column as wide as its longest name (a sweep names strategies of one kind apart).
    int width = 14;
    for (const StrategyConfig& sc : config.strategies) width = std::max(width, static_cast<int>(strategy_label(sc).size()));
    if (!o->json) {
      std::printf("%-*s %7s %3s %6s | %9s %8s | %11s %11s %11s | %11s %11s | %6s %9s\n", width, "strategy", "req/s", "rep", "reqs",
                  "req/min", "tok/s", "TTFT p50 ms", "TTFT p90 ms", "TTFT p99 ms", "turn p50 ms", "turn p90 ms", "hit %", "swap ms");
      std::fflush(stdout);
    }
    SweepEvents events;
    auto progress = std::make_shared<SweepProgress>();
    progress->runs = config.strategies.size() * std::max<std::size_t>(1, config.rates.size()) * static_cast<std::size_t>(std::max(1, config.repeats));
    auto chosen = std::make_shared<nlohmann::ordered_json>();  // --json: the probes and rates, when measured
    events.rates_chosen = [o, chosen, &config, width, progress](const std::vector<SaturationProbe>& probes, const std::vector<double>& rates) {
      progress->runs = 0;  // each strategy runs up to its own saturation
      for (const SaturationProbe& p : probes)
        progress->runs += strategy_rates(rates, *config.saturation, p).size() * static_cast<std::size_t>(std::max(1, config.repeats));
      if (o->json) {
        (*chosen)["saturation"] = nlohmann::ordered_json(saturation_json(probes));
        (*chosen)["rates"] = rates;
        return;
      }
      std::printf("rates (req/s):");
      for (double r : rates) std::printf(" %g", r);
      std::printf("\n%-*s %12s %8s %10s\n", width + 2, "saturation", "req/s", "burst", "runs to");
      for (const SaturationProbe& p : probes)
        std::printf("%-*s %12.4g %8zu %10g\n", width + 2, p.strategy.c_str(), p.rate_per_s, p.requests,
                    strategy_rates(rates, *config.saturation, p).back());
      std::fflush(stdout);
    };
    // The yardstick, between runs so that no run's clock sees it: LibTorch's fp32 matmul as a decode
    // step's projections are shaped ([64, 1024] × [1024, 1024]: compute, the weights in cache) and as
    // one token's are ([1, 4096] × [4096, 8192]: 128 MiB of weights streamed from memory), 0.2 s each.
    // The virtual clock charges measured compute, and this VM's speed moves: a run compares with
    // another only while these hold.
    const auto compute = [] { return measure_matmul(64, 1024, 1024, 0.2); };
    const auto stream = [] { return measure_matmul(1, 4096, 8192, 0.2); };
    events.run_started = [o, progress, compute, stream](SweepRun&, std::size_t) {
      if (o->yardstick) progress->compute_before = compute(), progress->stream_before = stream();
      ++progress->started;
      progress->run_t0 = std::chrono::steady_clock::now();
    };
    events.request_finished = [progress](const SweepRun& run, const RequestRecord&, std::size_t done, std::size_t total) {
      draw_progress(done, total, progress->label(run));
      return true;
    };
    events.run_finished = [o, results, width, progress, compute, stream](const SweepRun& run, const std::vector<RequestRecord>&, const RunSummary& s, bool) {
      const MatmulRate compute_after = o->yardstick ? compute() : MatmulRate{}, stream_after = o->yardstick ? stream() : MatmulRate{};
      if (o->json) {
        nlohmann::ordered_json j = {{"run", run.run_id}, {"strategy", run.strategy}, {"rate", run.rate}, {"repeat", run.repeat}};
        j.update(summary_json(s));
        if (o->yardstick) {
          j["yardstick_gflops"] = {{"before", progress->compute_before.gflops}, {"after", compute_after.gflops}};
          j["yardstick_stream_gbytes_per_s"] = {{"before", progress->stream_before.gbytes_per_s}, {"after", stream_after.gbytes_per_s}};
        }
        results->push_back(j);
        return;
      }
      constexpr double ms = 1e3;
      std::printf("%-*s %7s %3d %6lld | %9.1f %8.1f | %11.2f %11.2f %11.2f | %11.2f %11.2f | %6.1f %9.2f\n", width, run.strategy.c_str(),
                  format_rate(run.rate).c_str(), run.repeat, static_cast<long long>(s.requests), s.requests_per_minute, s.tokens_per_second, ms * s.ttft.p50,
                  ms * s.ttft.p90, ms * s.ttft.p99, ms * s.turnaround.p50, ms * s.turnaround.p90, 100.0 * s.hit_rate, ms * s.swap_seconds);
      if (o->yardstick)
        std::printf("%-*s yardstick: fp32 matmul %.1f GFLOP/s and %.1f GB/s streamed before the run, %.1f and %.1f after\n", width, "",
                    progress->compute_before.gflops, progress->stream_before.gbytes_per_s, compute_after.gflops, stream_after.gbytes_per_s);
      std::fflush(stdout);
    };
    // A recorder that fails mid-sweep (a full disk) stops recording, not the sweep: the results
    // still reach stdout, and the command then fails saying what was not recorded.
    std::optional<IoError> lost;
    auto failed = [&](const Error& e) {
      lost.emplace(e.subject(), e.item(), "stopped recording: " + e.problem() + "; the runs went on and are printed, not recorded",
                   "free space, or record to another file");
      std::fprintf(stderr, "\nerror: %s\n", lost->what());
    };
    try {
      if (config.clock == RunClock::Simulated) {
        // No engine and no weights: the variants' config.json files and the device profile suffice.
        const DeviceProfile device = load_device_profile(config.device_profile);
        simulate_sweep(config, load_sim_family(config.variants), device, recording(*recorder, events, failed)).rethrow();
      } else {
        Family family;
        open_family(family, config.variants);
        const HostStore store(family, config.host_budget);
        const auto analysis = analyzed(family, {default_cache_dir(), o->threads, {}});
        run_sweep(config, family, store, *analysis, recording(*recorder, events, failed)).rethrow();
      }
    } catch (...) {
      // A record this command created and no run reached (a variant that does not open, say) is
      // not left behind empty.
      if (!db_existed && progress->started == 0) {
        recorder.reset();
        for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(o->db.string() + suffix, ec);
      }
      throw;
    }
    if (o->json) {
      nlohmann::ordered_json doc{{"database", o->db.string()}, {"config", o->config.string()}, {"recorded", !lost}};
      if (chosen->is_object()) doc.update(*chosen);
      doc["runs"] = *results;
      std::cout << doc.dump(2) << "\n";
    } else if (!lost) {
      std::cout << "recorded to " << o->db.string() << "\n";
    }
    std::cout.flush();
    if (lost) throw *lost;
  });
}

}  // namespace mosaic::cli
