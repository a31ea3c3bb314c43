// bench --config: the QoS sweep (strategies × arrival rates × repeats) on one family, every request
// recorded to SQLite, a summary table printed per run.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "analysis/family_analysis.h"
#include "cli/commands.h"
#include "model/variant_folders.h"
#include "common/error.h"
#include "runtime/threads.h"
#include "serving/sweep.h"
#include "serving/sweep_run.h"
#include "store/recorder.h"
#include "store/sweep_recording.h"

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

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Run a QoS sweep (strategies × arrival rates × repeats) and record it to SQLite");
  struct Opts { fs::path config, db = "mosaic-runs.sqlite"; int threads = 0; };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->config, "sweep config (mosaic.sweep/1), e.g. sample_configs/paper-qos.json")->required();
  cmd->add_option("--db", o->db, "SQLite file to record into (created or migrated)")->default_val("mosaic-runs.sqlite");
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)")->default_val(0);
  cmd->callback([o] {
    configure_threads(o->threads);
    const SweepConfig config = load_sweep_config(o->config);
    Family family;
    open_family(family, config.variants);
    const HostStore store(family);
    const auto analysis = analyze_family(family, {default_cache_dir(), o->threads, {}});
    Recorder recorder(o->db);
    std::printf("%-14s %7s %3s %6s | %9s %8s | %9s %9s %9s | %9s %9s | %6s %8s\n", "strategy", "req/s", "rep", "reqs",
                "req/min", "tok/s", "TTFT p50", "TTFT p90", "TTFT p99", "turn p50", "turn p90", "hit %", "swap s");
    std::fflush(stdout);
    SweepEvents events;
    events.request_finished = [](const SweepRun& run, const RequestRecord&, std::size_t done, std::size_t total) {
      draw_progress(done, total, run.strategy + " @ " + std::to_string(run.rate).substr(0, 5) + " req/s");
      return true;
    };
    events.run_finished = [](const SweepRun& run, const std::vector<RequestRecord>&, const RunSummary& s, bool) {
      std::printf("%-14s %7.2f %3d %6lld | %9.1f %8.1f | %9.4f %9.4f %9.4f | %9.4f %9.4f | %6.1f %8.3f\n", run.strategy.c_str(),
                  run.rate, run.repeat, static_cast<long long>(s.requests), s.requests_per_minute, s.tokens_per_second, s.ttft.p50,
                  s.ttft.p90, s.ttft.p99, s.turnaround.p50, s.turnaround.p90, 100.0 * s.hit_rate, s.swap_seconds);
      std::fflush(stdout);
    };
    run_sweep(config, family, store, *analysis, recording(recorder, events)).rethrow();
    std::cout << "recorded to " << o->db.string() << "\n";
  });
}

}  // namespace mosaic::cli
