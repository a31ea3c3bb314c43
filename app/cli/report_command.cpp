// report: CSV and JSON of every metric of recorded runs, and (in a GUI build) the HTML and PDF
// report with charts drawn off screen.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "store/report_data.h"

#ifdef MOSAIC_REPORT_CHARTS
#include <QApplication>

#include <string>

#include "report/report_renderer.h"
#endif

namespace fs = std::filesystem;

namespace mosaic::cli {

void add_runs_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("runs", "List the runs recorded in a SQLite file (what `report` can draw)");
  struct Opts { fs::path db = "mosaic-runs.sqlite"; };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--db", o->db, "the SQLite record written by `mosaic-cli bench` or the workbench")->default_val("mosaic-runs.sqlite");
  cmd->callback([o] {
    if (!fs::exists(o->db))
      throw MissingError(o->db.string(), "", "does not exist", "record runs with `mosaic-cli bench --db FILE` first");
    const Recorder recorder(o->db, Recorder::Access::ReadOnly);
    const ReportData data = load_report_data(recorder, {}, o->db.filename().string(), /*incomplete=*/true);
    int width = 14;  // as wide as the longest strategy name
    for (const auto& r : data.runs) width = std::max(width, static_cast<int>(r.info.strategy.size()));
    std::printf("%5s  %-*s %-9s %8s %4s %6s  %11s %12s  %s\n", "run", width, "strategy", "status", "req/s", "rep", "reqs", "TTFT p50 ms",
                "turn p50 ms", "started (UTC)");
    for (const auto& r : data.runs) {
      const std::string rate = format_rate(r.rate);
      std::printf("%5lld  %-*s %-9s %8s %4d %6lld  %11.2f %12.2f  %s\n", static_cast<long long>(r.info.id), width, r.info.strategy.c_str(),
                  r.status().c_str(), r.external ? "—" : rate.c_str(), r.repeat, static_cast<long long>(r.summary.requests), 1e3 * r.summary.ttft.p50,
                  1e3 * r.summary.turnaround.p50, r.info.started_at.c_str());
    }
    // The path as a shell reads it back: quoted (a workbench record's folder may hold a space).
    std::string quoted = "'";
    for (char ch : o->db.string()) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    quoted += "'";
    std::printf("%zu run%s in %s; `mosaic-cli report --db %s RUN… --out DIR` draws some or all of them\n", data.runs.size(),
                data.runs.size() == 1 ? "" : "s", o->db.string().c_str(), quoted.c_str());
  });
}

void add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "Tables (CSV, JSON) and an HTML/PDF report with charts of recorded QoS runs");
  struct Opts { fs::path db = "mosaic-runs.sqlite", out; std::vector<std::int64_t> runs; bool all = false; };
  auto o = std::make_shared<Opts>();
  cmd->add_option("RUN", o->runs, "run ids to include (default: every run in the database that finished)");
  cmd->add_flag("--all", o->all, "also runs that did not finish (aborted, stopped, failed): their numbers are partial");
  cmd->add_option("--db", o->db, "the SQLite record written by `mosaic-cli bench`, `serve --db` or the workbench")->default_val("mosaic-runs.sqlite");
  cmd->add_option("--out", o->out, "report folder")->required();
  cmd->callback([o] {
    if (!fs::exists(o->db))
      throw MissingError(o->db.string(), "", "does not exist", "record runs with `mosaic-cli bench --db FILE` first");
    // The record and its WAL files: a report file of the same name must not replace them.
    const std::vector<fs::path> inputs{o->db, o->db.string() + "-wal", o->db.string() + "-shm"};
    check_output(o->out, "--out", inputs, OutputKind::Folder);
    const Recorder recorder(o->db, Recorder::Access::ReadOnly);
    const ReportData data = load_report_data(recorder, o->runs, o->db.filename().string(), o->all);
    if (data.runs.empty())
      throw InvalidArgument(o->db.string(), "", data.left_out.empty() ? "holds no runs" : "holds no finished runs",
                            data.left_out.empty() ? "record runs with `mosaic-cli bench --db FILE` first"
                                                  : "pass --all, or the ids of the runs to report, to report unfinished ones");
    check_one_setup(data, o->db.string());
    if (!data.left_out.empty()) {
      std::cerr << "left out " << data.left_out.size() << " run(s) that did not finish:";
      for (const RunInfo& r : data.left_out) std::cerr << " " << r.id << " (" << r.status << ")";
      std::cerr << "; pass --all or their ids to include them\n";
    }
    // Written beside the folder and moved in once whole: a full disk leaves no half-written report.
    StagedFolder staged(o->out);
    write_report_tables(data, staged.path());
#ifdef MOSAIC_REPORT_CHARTS
    // Charts need a QApplication; without a display the offscreen platform draws them.
    if (!std::getenv("QT_QPA_PLATFORM") && !std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY"))
      ::setenv("QT_QPA_PLATFORM", "offscreen", 1);
    // Qt warns on stderr when XDG_RUNTIME_DIR is unset (a shell without a login session): give it a
    // private folder of its own, as it wants one, for this process.
    std::string runtime_dir;
    if (!std::getenv("XDG_RUNTIME_DIR")) {
      char tmpl[] = "/tmp/mosaic-runtime-XXXXXX";
      if (const char* d = ::mkdtemp(tmpl)) {
        runtime_dir = d;
        ::setenv("XDG_RUNTIME_DIR", d, 1);
      }
    }
    struct RemoveDir {
      std::string d;
      ~RemoveDir() {
        std::error_code ec;
        if (!d.empty()) fs::remove_all(d, ec);
      }
    } remove_dir{runtime_dir};
    int argc = 1;
    char name[] = "mosaic-cli";
    char* argv[] = {name, nullptr};
    QApplication qt(argc, argv);
    const auto files = ui::render_report(data, staged.path());
    staged.publish("--out", inputs);
    std::cout << "wrote " << data.runs.size() << (data.runs.size() == 1 ? " run" : " runs") << ": tables, " << files.size() << " chart and report files in "
              << o->out.string() << " (open report.html)\n";
#else
    staged.publish("--out", inputs);
    std::cout << "wrote " << data.runs.size() << (data.runs.size() == 1 ? " run" : " runs") << " as CSV and JSON in " << o->out.string()
              << " (this build has no GUI: configure with -DMOSAIC_GUI=ON for the charts and the HTML/PDF report)\n";
#endif
  });
}

}  // namespace mosaic::cli
