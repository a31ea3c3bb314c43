// Reports: a real sweep of two strategies recorded to SQLite becomes CSV and JSON tables with the
// expected rows, and charts (PNG, SVG, PDF), an HTML page and a PDF report drawn off screen.
#include <QApplication>
#include <QFile>
#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QSet>
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis/family_analysis.h"
#include "common/error.h"
#include "report/report_renderer.h"
#include "report/report_content.h"
#include "serving/runner.h"
#include "serving/sweep.h"
#include "sim/device_profile.h"
#include "serving/sim_sweep.h"
#include "store/report_data.h"
#include "store/sweep_recording.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {
std::size_t lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}
std::string first_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}
QByteArray head_of(const fs::path& p, int n) {
  QFile f(QString::fromStdString(p.string()));
  return f.open(QIODevice::ReadOnly) ? f.read(n) : QByteArray();
}
}  // namespace

class TestReport : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    // Two strategies × two rates × two repeats of a real (small) workload, recorded.
    Family f;
    for (const char* v : {"base", "ft1", "ft2"}) f.add(v, fixture("olmoe", v));
    const HostStore store(f);
    const auto analysis = analyze_family(f);
    Recorder rec(scratch("runs.sqlite"));
    for (StrategyKind kind : {StrategyKind::Consolidated, StrategyKind::TimeSharing}) {
      const Deployment server({.kind = kind, .capacity = 9}, f, store, *analysis, scratch(""));
      for (double rate : {2.0, 8.0})
        for (int rep = 0; rep < 2; ++rep) {
          const auto w = generate_workload({.targets = {"base", "ft1", "ft2"}, .total_rate = rate, .duration_seconds = 3,
                                            .prompt = {4, 6}, .output = {2, 3}, .vocab_size = 320,
                                            .seed = static_cast<std::uint64_t>(rep + 1)});
          // As a sweep records it: the run's own settings and the sweep as written.
          const nlohmann::json config = {{"rate", rate}, {"repeat", rep}, {"capacity", 9}, {"max_sequences", 1}, {"clock", "real"},
                                         {"sweep", {{"variants", {"../olmoe/base", "../olmoe/ft1", "../olmoe/ft2"}}, {"duration_seconds", 3}}}};
          const auto run = rec.begin_run(server.name(), config.dump());
          run_workload(server, w, {.on_finished = [&](const RequestRecord& r) { rec.record(run, r); }});
          rec.finish_run(run, "finished");
        }
    }
  }

  void tablesHoldEveryRunAndRequest() {
    const Recorder rec(scratch("runs.sqlite"));
    const ReportData d = load_report_data(rec, {}, "runs.sqlite");
    QCOMPARE(d.runs.size(), std::size_t(8));
    QCOMPARE(d.strategies, (std::vector<std::string>{"consolidated", "time-sharing"}));
    QCOMPARE(d.points.size(), std::size_t(4));
    QCOMPARE(d.points[1].rate, 8.0);
    QCOMPARE(d.points[1].runs, 2);
    // Consolidated misses at the positions it does not hold; time-sharing holds the whole model.
    for (double h : d.layer_hit_rates.at("time-sharing")) QCOMPARE(h, 1.0);
    const auto& consolidated = d.layer_hit_rates.at("consolidated");  // C = 9 of 24: most residents in layer 0
    QVERIFY(std::any_of(consolidated.begin(), consolidated.end(), [](double h) { return h < 1; }));
    QVERIFY(d.points[0].hit_rate > 0 && d.points[0].hit_rate < 1);

    // The spread between repeats: each run's figure, not a blend of their requests.
    std::vector<double> ttft, throughput;
    for (const ReportRun& r : d.runs)
      if (r.info.strategy == d.points[1].strategy && r.rate == d.points[1].rate) {
        ttft.push_back(r.summary.ttft.mean);
        throughput.push_back(r.summary.requests_per_minute);
      }
    QCOMPARE(ttft.size(), std::size_t(2));
    QVERIFY(ttft[0] != ttft[1]);  // seeds differ per repeat
    QCOMPARE(d.points[1].ttft_mean, (ttft[0] + ttft[1]) / 2);
    QVERIFY(std::abs(d.points[1].ttft_mean_sd - std::abs(ttft[0] - ttft[1]) / std::sqrt(2.0)) < 1e-12);
    QVERIFY(std::abs(d.points[1].requests_per_minute_sd - std::abs(throughput[0] - throughput[1]) / std::sqrt(2.0)) < 1e-12);
    // One run at a point has no spread to give.
    const ReportData one = load_report_data(rec, {1}, "runs.sqlite");
    QVERIFY(std::isnan(one.points[0].ttft_mean_sd) && std::isnan(one.points[0].requests_per_minute_sd));

    write_report_tables(d, scratch("report"));
    std::size_t requests = 0;
    for (const auto& r : d.runs) requests += static_cast<std::size_t>(r.summary.requests);
    QCOMPARE(lines_of(scratch("report/runs.csv")), std::size_t(8 + 1));
    QCOMPARE(lines_of(scratch("report/points.csv")), std::size_t(4 + 1));
    QCOMPARE(lines_of(scratch("report/layer_hit_rates.csv")), std::size_t(2 * 3 + 1));
    QCOMPARE(lines_of(scratch("report/requests.csv")), requests + 1);
    const auto j = nlohmann::json::parse(std::ifstream(scratch("report/report.json")));
    QCOMPARE(j["runs"].size(), std::size_t(8));
    QCOMPARE(j["points"][3]["strategy"].get<std::string>(), std::string("time-sharing"));
    QCOMPARE(j["layer_hit_rates"]["time-sharing"][2].get<double>(), 1.0);
    QCOMPARE(j["points"][1]["ttft_mean_seconds_sd"].get<double>(), d.points[1].ttft_mean_sd);
    QVERIFY(nlohmann::json::parse(std::ifstream(scratch("report/report.json")))["runs"][0].contains("rate_per_second"));
    // Every column with a unit names it.
    QCOMPARE(first_line(scratch("report/points.csv")),
             std::string("strategy,rate_per_s,runs,requests_per_min,requests_per_min_sd,tokens_per_s,tokens_per_s_sd,ttft_mean_s,"
                         "ttft_mean_s_sd,ttft_p90_s,turnaround_mean_s,turnaround_mean_s_sd,turnaround_p90_s,hit_rate,swap_s"));
    for (const char* table : {"runs.csv", "requests.csv"})
      for (const char* column : {"ttft", "turnaround", "arrival", "tpot", "queue_wait", "rate"}) {
        const std::string header = "," + first_line(scratch(std::string("report/") + table)) + ",";
        for (std::size_t at = header.find("," + std::string(column)); at != std::string::npos; at = header.find("," + std::string(column), at + 1)) {
          const std::string name = header.substr(at + 1, header.find(',', at + 1) - at - 1);
          QVERIFY2(name.ends_with("_s") || name.ends_with("_per_s"), (std::string(table) + ": " + name).c_str());
        }
      }
    // Multi-MoE's Table 1: served one at a time, every decode step ran alone. Time-sharing holds
    // every expert, so each of its layer-steps had all k resident; consolidated's had fewer too.
    const auto& whole = d.alone_layer_times.at("time-sharing");
    QVERIFY(whole.size() >= 2 && whole.back().steps > 0);
    for (std::size_t h = 0; h + 1 < whole.size(); ++h) QCOMPARE(whole[h].steps, std::int64_t(0));
    const auto& mixed = d.alone_layer_times.at("consolidated");
    const auto filled = std::count_if(mixed.begin(), mixed.end(), [](const LayerTime& t) { return t.steps > 0; });
    QVERIFY(filled >= 2);
    QCOMPARE(lines_of(scratch("report/layer_latency.csv")), static_cast<std::size_t>(1 + filled + 1));
    QCOMPARE(j["layer_latency_by_hits"]["time-sharing"][0]["hits"].get<std::size_t>(), whole.size() - 1);
    QVERIFY(j["layer_latency_by_hits"]["time-sharing"][0]["expert_seconds"].get<double>() > 0);

    // Only the runs asked for; an id that is not there is refused.
    QCOMPARE(load_report_data(rec, {1, 2}, "runs.sqlite").runs.size(), std::size_t(2));
    expect_mentions(error_of<InvalidArgument>([&] { load_report_data(rec, {99}, "runs.sqlite"); }), {"run 99"});
  }

  void chartsAndPagesAreDrawn() {
    const Recorder rec(scratch("runs.sqlite"));
    const ReportData d = load_report_data(rec, {}, "runs.sqlite");
    const auto files = ui::render_report(d, scratch("report"));
    QCOMPARE(files.size(), std::size_t(4 * 3 + 2));
    for (const char* chart : {"throughput", "ttft", "turnaround", "hit_rates"}) {
      const QImage png(QString::fromStdString(scratch(std::string("report/") + chart + ".png").string()));
      QCOMPARE(png.size(), QSize(900, 520));
      QSet<QRgb> colors;  // a drawn chart, not a blank canvas
      for (int y = 0; y < png.height(); y += 4)
        for (int x = 0; x < png.width(); x += 4) colors.insert(png.pixel(x, y));
      QVERIFY2(colors.size() > 10, chart);
      QVERIFY(head_of(scratch(std::string("report/") + chart + ".svg"), 200).contains("<svg"));
      QVERIFY(head_of(scratch(std::string("report/") + chart + ".pdf"), 5) == "%PDF-");
    }
    QVERIFY(head_of(scratch("report/report.pdf"), 5) == "%PDF-");
    // Charts drawn as vectors: the page holds no raster image at all.
    const QByteArray pdf = head_of(scratch("report/report.pdf"), 1 << 24);
    QVERIFY(!pdf.contains("/Subtype /Image") && !pdf.contains("/DCTDecode"));
    const QByteArray html = head_of(scratch("report/report.html"), 1 << 20);
    for (const char* part : {"Table 2", "Table 1", "throughput.svg", "hit_rates.svg", "time-sharing", "consolidated", "Family"})
      QVERIFY2(html.contains(part), part);

    // What the PDF says, as a reader copies it out (poppler-utils, installed by installer/setup-debian.sh).
    QProcess text;
    text.start(QStringLiteral("pdftotext"), {QString::fromStdString(scratch("report/report.pdf").string()), QStringLiteral("-")});
    QVERIFY2(text.waitForFinished(30000) && text.exitCode() == 0, "pdftotext is missing: run installer/setup-debian.sh");
    const QString page = QString::fromUtf8(text.readAllStandardOutput());
    // The setup that was run: family, capacity, batching, clock and durations.
    for (const char* part : {"3 variants served together: base, ft1, ft2", "consolidated (9 experts resident)", "one request at a time",
                             "Clock", "real", "3 s asked", "Figure 1.", "Figure 4.", "Table 3.", "Table 4.",
                             "Multi-MoE Table 1", "2 resident", "cpu (the fp32 reference backend"})
      QVERIFY2(page.contains(QString::fromUtf8(part)), part);
    // Column widths fit their cells: no word is cut across lines (in reading order a cut header cell
    // reads "strate" then "gy" on the next line).
    for (const char* word : {"consolidated", "strategy", "throughput", "turnaround"}) {
      const QString w = QString::fromUtf8(word);
      for (int cut = 3; cut < w.size() - 2; ++cut)
        QVERIFY2(!QRegularExpression(QRegularExpression::escape(w.left(cut)) + QStringLiteral("\\s*\\n\\s*") + QRegularExpression::escape(w.mid(cut))).match(page).hasMatch(),
                 qPrintable(QStringLiteral("'%1' broken after '%2'").arg(w, w.left(cut))));
    }
    QVERIFY2(page.count(QStringLiteral("consolidated")) >= 4 + 1 + 4, qPrintable(page));  // Tables 1 to 4's rows
    // Two repeats a rate: Table 1 gives their spread, and the charts draw it and say so.
    const ui::ReportContent content = ui::report_content(d);
    QVERIFY2(content.tables[0].rows[1][7].contains(QStringLiteral(" ± ")), qPrintable(content.tables[0].rows[1].join(QLatin1Char('|'))));
    QCOMPARE(content.charts[1].series[0].error.size(), content.charts[1].series[0].y.size());
    QVERIFY(content.charts[1].series[0].error[1] > 0);
    QVERIFY2(page.contains(QStringLiteral("Bars: ± one standard deviation between the repeats")), qPrintable(page));
  }

  // A simulated sweep's report says how its tokens chose experts: the routing model's file, how many
  // experts a prompt touches and where the model came from, not "uniformly at random".
  void simulatedRunsSayHowTokensRouted() {
    SweepConfig config = load_sweep_config(fs::path(MOSAIC_SOURCE_DIR) / "sample_configs" / "paper-table2.json");
    config.rates = {0.01};
    config.repeats = 1;
    config.workload.duration_seconds = 500;
    config.strategies.resize(1);
    Recorder rec(scratch("simulated.sqlite"));
    QVERIFY(simulate_sweep(config, load_sim_family(config.variants), load_device_profile(config.device_profile),
                           recording(rec, {}, [](const Error& e) { QFAIL(e.what()); }))
                .ok());
    const ui::ReportContent c = ui::report_content(load_report_data(rec, {}, "simulated.sqlite"));
    QString routing, clock;
    for (const auto& [what, value] : c.setup) {
      if (what == QStringLiteral("Routing")) routing = value;
      if (what == QStringLiteral("Clock")) clock = value;
    }
    for (const char* part : {"mixtral-8x7b-published.json", "7.78 distinct experts per MoE layer", "Jiang et al. 2024"})
      QVERIFY2(routing.contains(QString::fromUtf8(part)), qPrintable(routing));
    QVERIFY2(clock.contains(QStringLiteral("simulated")) && !clock.contains(QStringLiteral("uniformly")), qPrintable(clock));
    for (const auto& setup : c.setup) QVERIFY2(setup.first != QStringLiteral("Device"), "nothing was computed: the profile is the device");

    // Mixtral's 32 layers make Table 2 wider than the page: the PDF sets it in parts, the strategy
    // repeated in each, and every layer is there (it had stopped at layer 18, the rest off the page).
    const ReportData d = load_report_data(rec, {}, "simulated.sqlite");
    QCOMPARE(d.layer_hit_rates.begin()->second.size(), std::size_t(32));
    ui::render_report(d, scratch("wide"));
    QProcess text;
    text.start(QStringLiteral("pdftotext"), {QStringLiteral("-layout"), QString::fromStdString(scratch("wide/report.pdf").string()), QStringLiteral("-")});
    QVERIFY2(text.waitForFinished(30000) && text.exitCode() == 0, "pdftotext is missing: run installer/setup-debian.sh");
    const QString page = QString::fromUtf8(text.readAllStandardOutput());
    QVERIFY2(page.contains(QStringLiteral("Table 2, continued: layer ")) && page.contains(QStringLiteral(" to layer 31.")), qPrintable(page));
    // Rates below 0.1 keep their digits.
    QCOMPARE(format_rate(0.002), std::string("0.002"));
    QCOMPARE(format_rate(0.05), std::string("0.05"));
    QCOMPARE(format_rate(2), std::string("2.00"));
    QCOMPARE(format_rate(0), std::string("0.00"));
  }

  // Runs of two families (or clocks) recorded into one file are not reported as one experiment: their
  // points would be averaged together under one Setup. Named apart, each reports.
  void runsOfTwoSetupsAreNotReportedAsOne() {
    const fs::path db = scratch("mixed.sqlite");
    {
      Recorder rec(db);
      auto run = [&](const char* strategy, const std::vector<std::string>& variants, const char* clock) {
        const auto id = rec.begin_run(strategy, nlohmann::json{{"rate", 1}, {"clock", clock}, {"sweep", {{"variants", variants}}}}.dump());
        rec.finish_run(id, "finished");
      };
      run("consolidated", {"olmoe/base", "olmoe/ft1"}, "virtual");
      run("time-sharing", {"/elsewhere/olmoe/base/", "olmoe/ft1"}, "virtual");  // the same folders, written otherwise
      run("consolidated", {"deepseek/base", "deepseek/law"}, "simulated");
    }
    const Recorder rec(db, Recorder::Access::ReadOnly);
    try {
      check_one_setup(load_report_data(rec, {}, "mixed.sqlite"), "mixed.sqlite");
      QFAIL("runs of two families were accepted as one report");
    } catch (const InvalidArgument& e) {
      const QString m = QString::fromUtf8(e.what());
      QVERIFY2(m.contains(QStringLiteral("2 setups")) && m.contains(QStringLiteral("runs 1 2:")) && m.contains(QStringLiteral("runs 3:")) &&
                   m.contains(QStringLiteral("law")) && m.contains(QStringLiteral("simulated clock")),
               qPrintable(m));
    }
    check_one_setup(load_report_data(rec, {1, 2}, "mixed.sqlite"), "mixed.sqlite");  // one setup: no complaint
    QProcess report;
    report.start(QStringLiteral(MOSAIC_CLI), {QStringLiteral("report"), QStringLiteral("--db"), QString::fromStdString(db.string()),
                                               QStringLiteral("--out"), QString::fromStdString(scratch("mixed-report").string())});
    QVERIFY(report.waitForFinished(60000));
    QCOMPARE(report.exitCode(), 2);
    QVERIFY2(QString::fromUtf8(report.readAllStandardError()).contains(QStringLiteral("report each setup on its own")), "the CLI says what to do");
    QVERIFY(!fs::exists(scratch("mixed-report")));
  }

  // Strategies named apart within their sweep ("single (capacity 8)", "space-sharing+ahead") keep
  // their kind's explanation; "single-resident" and a name of the user's own say nothing of theirs.
  void namedStrategiesKeepTheirKindsExplanation() {
    auto definition = [&](const std::string& db, const std::vector<std::string>& names) {
      Recorder rec(scratch(db));
      for (const std::string& name : names)
        rec.finish_run(rec.begin_run(name, nlohmann::json{{"rate", 1}, {"clock", "virtual"}, {"capacity", 8}}.dump()), "finished");
      return ui::report_content(load_report_data(rec, {}, db)).throughput_definition;
    };
    const QString named = definition("named.sqlite", {"single (capacity 8)", "space-sharing+ahead", "consolidated (capacity 8)"});
    QVERIFY2(named.contains(QStringLiteral("Single is the paper's single model")) && named.contains(QStringLiteral("Space-sharing models MIG")),
             qPrintable(named));
    const QString other = definition("other.sqlite", {"single-resident", "my-space-sharing", "consolidated"});
    QVERIFY2(!other.contains(QStringLiteral("Single is")) && !other.contains(QStringLiteral("models MIG")), qPrintable(other));
  }

  // A serve run takes external requests at no arrival rate: the report says so and plots it against
  // none; a server that served nothing recorded an "empty" run, left out; a sweep run that completed
  // nothing within its arrival window is "saturated", in the tables and in `runs`.
  void serveEmptyAndSaturatedRunsAreSaidSo() {
    {
      Recorder rec(scratch("kinds.sqlite"));
      std::int64_t index = 0;
      auto request = [&](double arrival, double finish) {
        RequestRecord r;
        r.index = index++ % 2;
        r.target = "ft1";
        r.stats.arrival = arrival;
        r.stats.start = r.stats.first_token = arrival + 0.1;
        r.stats.finish = finish;
        r.stats.prompt_tokens = 4;
        r.stats.generated_tokens = 3;
        return r;
      };
      const auto swamped = rec.begin_run("consolidated", nlohmann::json{{"rate", 2}, {"clock", "virtual"}}.dump());
      for (double a : {0.0, 1.0}) rec.record(swamped, request(a, 5.0 + a));  // both finish after the last arrival
      rec.finish_run(swamped, "finished");
      const auto served = rec.begin_run("serve", nlohmann::json{{"kind", "serve"}, {"host", "127.0.0.1"}, {"port", 0}}.dump());
      for (double a : {0.0, 2.0}) rec.record(served, request(a, a + 0.5));
      rec.finish_run(served, "finished");
      rec.finish_run(rec.begin_run("serve", nlohmann::json{{"kind", "serve"}}.dump()), "empty");
      // One request alone cannot finish within a window that ends at its arrival: not "saturated".
      const auto lone = rec.begin_run("single", nlohmann::json{{"rate", 0.1}, {"clock", "virtual"}}.dump());
      rec.record(lone, request(3.0, 3.5));
      rec.finish_run(lone, "finished");
    }  // closed: the file holds it all
    const Recorder rec(scratch("kinds.sqlite"), Recorder::Access::ReadOnly);
    const ReportData d = load_report_data(rec, {}, "kinds.sqlite");
    QCOMPARE(d.runs.size(), std::size_t(3));
    QCOMPARE(d.left_out.size(), std::size_t(1));
    QCOMPARE(d.left_out[0].status, std::string("empty"));
    QCOMPARE(d.runs[0].status(), std::string("saturated"));
    QVERIFY(d.runs[1].external && d.runs[1].status() == "finished");
    QCOMPARE(d.runs[2].status(), std::string("finished"));
    const auto content = ui::report_content(d);
    QString arrivals;
    for (const auto& [what, value] : content.setup)
      if (what == QStringLiteral("Arrivals")) arrivals = value;
    QVERIFY2(arrivals.contains(QStringLiteral("Poisson at 0.1 and 2 requests/s")) && arrivals.contains(QStringLiteral("external requests")), qPrintable(arrivals));
    QVERIFY2(content.subtitle.startsWith(QStringLiteral("3 runs of 3 strategies")), qPrintable(content.subtitle));
    bool dash = false, saturated = false;
    for (const auto& table : content.tables)
      for (const QStringList& row : table.rows) {
        dash |= row.size() > 3 && row[0] == QStringLiteral("serve") && row[1] == QStringLiteral("—");
        saturated |= row.contains(QStringLiteral("saturated"));
      }
    QVERIFY(dash && saturated);
    for (const auto& chart : content.charts)
      for (const auto& series : chart.series)
        if (series.name == QStringLiteral("serve") && chart.stem != QStringLiteral("hit_rates")) QVERIFY2(series.x.isEmpty(), qPrintable(chart.stem));
    // `runs` says the same, and quotes the path it hands back.
    const fs::path spaced = scratch("with space.sqlite");
    fs::copy_file(scratch("kinds.sqlite"), spaced);
    QProcess runs;
    runs.start(QStringLiteral(MOSAIC_CLI), {QStringLiteral("runs"), QStringLiteral("--db"), QString::fromStdString(spaced.string())});
    QVERIFY(runs.waitForFinished(60000));
    const QString out = QString::fromUtf8(runs.readAllStandardOutput());
    QVERIFY2(out.contains(QStringLiteral("saturated")) && out.contains(QStringLiteral("empty")) && out.contains(QStringLiteral("—")), qPrintable(out));
    QVERIFY2(out.contains(QStringLiteral("--db '") + QString::fromStdString(spaced.string()) + QStringLiteral("'")), qPrintable(out));
  }

  // An engine run says which backend served it: a GPU run its GPU, a record from before sweeps named
  // a device the CPU reference (they had no other).
  void engineRunsNameTheirDevice() {
    Recorder rec(scratch("devices.sqlite"));
    for (const char* device : {"cuda: NVIDIA H100 80GB HBM3, 79.2 GiB, compute 9.0", ""}) {
      nlohmann::json config = {{"rate", 1}, {"clock", "virtual"}};
      if (*device) config["device"] = device;
      rec.finish_run(rec.begin_run("consolidated", config.dump()), "finished");
    }
    const ReportData d = load_report_data(rec, {}, "devices.sqlite");
    QCOMPARE(d.runs[1].device, std::string("cpu"));
    QString device;
    for (const auto& [what, value] : ui::report_content(d).setup)
      if (what == QStringLiteral("Device")) device = value;
    QVERIFY2(device.contains(QStringLiteral("cuda: NVIDIA H100 80GB HBM3")) && device.contains(QStringLiteral("cpu (the fp32 reference")),
             qPrintable(device));
  }
};

QTEST_MAIN(TestReport)
#include "tst_report.moc"
