#include "report/report_content.h"

#include <QFileInfo>
#include <QLocale>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "report/plot_export.h"
#include "report/qcustomplot_include.h"
#include "report/qt_text.h"

namespace mosaic::ui {
namespace {

QString fmt(double v, int digits) { return std::isnan(v) ? QStringLiteral("–") : QString::number(v, 'f', digits); }
QString ms(double seconds) { return fmt(1e3 * seconds, 2); }
// A layer's time, to three significant digits: tens of microseconds on a small model, tens of
// milliseconds on a large one, and the differences between hits show either way.
QString ms_layer(double seconds) {
  const double v = 1e3 * seconds;
  if (std::isnan(v)) return QStringLiteral("–");
  if (v <= 0) return QStringLiteral("0");
  if (v >= 100) return QString::number(v, 'f', 1);
  if (v >= 1) return QString::number(v, 'f', 2);
  return QString::number(v, 'f', std::max(3, 2 - static_cast<int>(std::floor(std::log10(std::max(v, 1e-9))))));
}
// "mean ± sd", or the mean alone where a point had one run.
QString spread(double mean, double sd, int digits, double scale = 1) {
  return std::isnan(sd) ? fmt(scale * mean, digits) : QStringLiteral("%1 ± %2").arg(fmt(scale * mean, digits), fmt(scale * sd, digits));
}
// Whether a series has a spread to draw: a point of several runs that disagree.
bool has_spread(const ChartSeries& s) {
  return std::any_of(s.error.begin(), s.error.end(), [](double e) { return e > 0; });
}
QString percent(double fraction) { return std::isnan(fraction) ? QStringLiteral("–") : fmt(100 * fraction, 1); }

// "5, 20 and 40"
QString joined(const QStringList& items) {
  if (items.size() < 2) return items.join(QString());
  return items.mid(0, items.size() - 1).join(QStringLiteral(", ")) + QStringLiteral(" and ") + items.back();
}

QString strategy_setup(const std::string& strategy, const ReportData& d) {
  for (const ReportRun& r : d.runs)
    if (r.info.strategy == strategy && r.capacity > 0)  // a name that gives its capacity already says so
      return strategy.find("capacity ") != std::string::npos ? q(strategy)
                                                             : QStringLiteral("%1 (%2 experts resident)").arg(q(strategy)).arg(r.capacity);
  return q(strategy);
}

QString batching(std::int64_t max_sequences) {
  if (max_sequences == 1) return QStringLiteral("one request at a time, as the paper serves");
  return QStringLiteral("continuous, up to %1 sequences at once").arg(max_sequences);
}

// Said once when every strategy batched alike, else per strategy.
QString batching_of(const ReportData& d) {
  std::map<std::string, std::int64_t> by_strategy;
  for (const ReportRun& r : d.runs)
    if (r.max_sequences > 0) by_strategy[r.info.strategy] = r.max_sequences;
  std::set<std::int64_t> values;
  for (const auto& [s, m] : by_strategy) values.insert(m);
  if (values.empty()) return {};
  if (values.size() == 1) return batching(*values.begin());
  QStringList parts;
  for (const std::string& s : d.strategies)
    if (by_strategy.count(s)) parts << QStringLiteral("%1: %2").arg(q(s), batching(by_strategy[s]));
  return parts.join(QStringLiteral("; "));
}

QList<QPair<QString, QString>> setup_of(const ReportData& d) {
  QList<QPair<QString, QString>> out;
  QStringList variants;
  for (const ReportRun& r : d.runs)
    for (const std::string& v : r.variants) {
      const QString name = QFileInfo(q(v)).fileName().isEmpty() ? q(v) : QFileInfo(q(v)).fileName();
      if (!variants.contains(name)) variants << name;
    }
  if (!variants.isEmpty())
    out << qMakePair(QStringLiteral("Family"), QStringLiteral("%1 variants served together: %2").arg(variants.size()).arg(variants.join(QStringLiteral(", "))));
  QStringList strategies;
  for (const std::string& s : d.strategies) strategies << strategy_setup(s, d);
  out << qMakePair(QStringLiteral("Strategies"), strategies.join(QStringLiteral(", ")));
  if (const QString b = batching_of(d); !b.isEmpty()) out << qMakePair(QStringLiteral("Batching"), b);
  std::set<double> rates;
  bool external = false;
  std::set<std::string> clocks, devices, profiles, routings;
  std::map<std::pair<std::string, double>, std::set<int>> repeat_count;  // the repeats each point holds
  double asked = 0, window_min = INFINITY, window_max = 0, drain_max = 0, makespan = 0;
  for (const ReportRun& r : d.runs) {
    if (r.external) external = true;
    else rates.insert(r.rate);
    if (!r.clock.empty()) clocks.insert(r.clock);
    if (!r.device.empty()) devices.insert(r.device);
    if (!r.device_profile.empty()) profiles.insert(r.device_profile);
    if (!r.routing.empty()) routings.insert(r.routing);
    if (!r.external) repeat_count[{r.info.strategy, r.rate}].insert(r.repeat);
    asked = std::max(asked, r.duration_seconds);
    window_min = std::min(window_min, r.summary.window_seconds);
    window_max = std::max(window_max, r.summary.window_seconds);
    drain_max = std::max(drain_max, r.summary.drain_seconds);
    makespan += r.summary.makespan_seconds;
  }
  QStringList rate_text;
  for (double r : rates) rate_text << QLocale::c().toString(r, 'g', 4);
  std::set<std::size_t> repeats;
  for (const auto& [point, indices] : repeat_count) repeats.insert(indices.size());
  const QString repeat_text = repeats.size() == 1 ? QStringLiteral("%1 repeat%2 each").arg(*repeats.begin()).arg(*repeats.begin() == 1 ? QString() : QStringLiteral("s"))
                                                  : QStringLiteral("%1–%2 repeats each").arg(*repeats.begin()).arg(*repeats.rbegin());
  QStringList arrivals;
  if (!rates.empty()) arrivals << QStringLiteral("Poisson at %1 requests/s, %2").arg(joined(rate_text), repeat_text);
  if (external) arrivals << QStringLiteral("serve runs: external requests from HTTP clients, at no arrival rate of their own (not plotted against one)");
  if (!arrivals.isEmpty()) out << qMakePair(QStringLiteral("Arrivals"), arrivals.join(QStringLiteral("; ")));
  if (!d.runs.empty()) {
    QString windows = asked > 0 ? QStringLiteral("%1 s asked; ").arg(asked) : QString();
    windows += window_min == window_max ? QStringLiteral("%1 s measured").arg(fmt(window_min, 2))
                                        : QStringLiteral("%1–%2 s measured").arg(fmt(window_min, 2), fmt(window_max, 2));
    out << qMakePair(QStringLiteral("Arrival window"), windows + QStringLiteral("; drain at most %1 s; %2 s served in all").arg(fmt(drain_max, 2), fmt(makespan, 1)));
  }
  if (!clocks.empty()) {
    QStringList c;
    for (const std::string& s : clocks) c << q(s);
    out << qMakePair(QStringLiteral("Clock"), c.join(QStringLiteral(", ")) +
                                                  (clocks.count("virtual") ? QStringLiteral(" (time moves on by each step's measured cost and jumps over idle gaps, so queueing is what it would be on an engine this fast)") : QString()) +
                                                  (clocks.count("simulated") ? QStringLiteral(" (nothing was computed; the engine served a simulated device, its scheduler and runtime deciding every step and a cost model pricing it from the model's shapes — bytes moved and flops done — on the device profile below, with tokens routed as the routing below says)") : QString()));
  }
  if (!devices.empty()) {
    QStringList v;
    for (const std::string& s : devices) v << (s == "cpu" ? QStringLiteral("cpu (the fp32 reference backend, on the machine below)") : q(s));
    out << qMakePair(QStringLiteral("Device"), v.join(QStringLiteral("; ")));
  }
  if (!profiles.empty()) {
    QStringList p;
    for (const std::string& s : profiles) p << q(s);
    out << qMakePair(QStringLiteral("Device profile"), p.join(QStringLiteral(", ")));
  }
  if (!routings.empty()) {
    QStringList r;
    for (const std::string& s : routings) r << (s == "uniform" ? QStringLiteral("uniform top-k, at random") : q(s));
    out << qMakePair(QStringLiteral("Routing"), r.join(QStringLiteral("; ")));
  }
  if (!d.runs.empty()) {
    out << qMakePair(QStringLiteral("Machine"), q(d.runs.front().info.machine));
    out << qMakePair(QStringLiteral("Build"), q(d.runs.front().info.build));
    const std::string& until = d.runs.back().info.finished_at;  // empty for a run that never finished (aborted)
    out << qMakePair(QStringLiteral("Recorded"), QStringLiteral("%1 run%2 in %3, from %4 %5")
                                                     .arg(d.runs.size())
                                                     .arg(d.runs.size() == 1 ? QString() : QStringLiteral("s"))
                                                     .arg(q(d.database), q(d.runs.front().info.started_at),
                                                          until.empty() ? QStringLiteral("(the last run did not finish)") : QStringLiteral("to ") + q(until)));
  }
  return out;
}

std::vector<ChartSpec> charts_of(const ReportData& d) {
  ChartSpec throughput{QStringLiteral("throughput"), QStringLiteral("Throughput against arrival rate (Multi-MoE Fig. 4)"),
                       QStringLiteral("Requests completed within the arrival window per minute of it, against the rate offered. "
                                      "The dashed line is throughput equal to the arrival rate: a strategy that keeps up lies on it (above it by the chance of "
                                      "Poisson arrivals), one that saturates falls below."),
                       QStringLiteral("arrival rate (requests/min)"), QStringLiteral("throughput (requests/min)"), {}, true, false};
  ChartSpec ttft{QStringLiteral("ttft"), QStringLiteral("Mean time to first token"),
                 QStringLiteral("Mean TTFT per arrival rate: the mean of each run's mean, over the repeats at that rate."),
                 QStringLiteral("arrival rate (requests/min)"), QStringLiteral("TTFT (ms)"), {}, false, false};
  ChartSpec turnaround{QStringLiteral("turnaround"), QStringLiteral("Mean turnaround"),
                       QStringLiteral("Mean time from arrival to last token per arrival rate."),
                       QStringLiteral("arrival rate (requests/min)"), QStringLiteral("turnaround (ms)"), {}, false, false};
  ChartSpec hits{QStringLiteral("hit_rates"), QStringLiteral("Expert hit rate per layer"),
                 QStringLiteral("Share of routed experts found resident, per MoE layer, over every run of each strategy."),
                 QStringLiteral("layer"), QStringLiteral("hit rate (%)"), {}, false, true};
  for (const std::string& s : d.strategies) {
    ChartSeries t{q(s), {}, {}, {}}, f{q(s), {}, {}, {}}, a{q(s), {}, {}, {}}, h{q(s), {}, {}, {}};
    auto add = [](ChartSeries& c, double x, double y, double sd) {
      c.x << x;
      c.y << y;
      c.error << sd;  // NaN (one run) draws no bar, not a flat tick
    };
    for (const ReportPoint& p : d.points) {
      if (p.strategy != s || p.external) continue;
      add(t, p.rate * 60, p.requests_per_minute, p.requests_per_minute_sd);
      add(f, p.rate * 60, 1e3 * p.ttft_mean, 1e3 * p.ttft_mean_sd);
      add(a, p.rate * 60, 1e3 * p.turnaround_mean, 1e3 * p.turnaround_mean_sd);
    }
    const auto& rates = d.layer_hit_rates.at(s);
    for (std::size_t l = 0; l < rates.size(); ++l)
      if (!std::isnan(rates[l])) {
        h.x << static_cast<double>(l);
        h.y << 100 * rates[l];
      }
    throughput.series.push_back(t);
    ttft.series.push_back(f);
    turnaround.series.push_back(a);
    hits.series.push_back(h);
  }
  // Say what the bars are where some point has them.
  for (ChartSpec* c : {&throughput, &ttft, &turnaround}) {
    if (std::any_of(c->series.begin(), c->series.end(), has_spread)) c->caption += QStringLiteral(" Bars: ± one standard deviation between the repeats at a rate.");
  }
  return {throughput, ttft, turnaround, hits};
}

// Multi-MoE's Table 1: a layer's attention, and its expert block by hits among the top-k, in steps
// where a request ran one token alone.
ReportTable layer_latency_table(const ReportData& d) {
  std::size_t columns = 0;
  std::int64_t steps = 0;
  for (const auto& [s, times] : d.alone_layer_times) {
    columns = std::max(columns, times.size());
    for (const LayerTime& t : times) steps += t.steps;
  }
  ReportTable table{QStringLiteral("Table 3. A MoE layer's latency (ms) in steps where a request decoded alone, by how many of its token's "
                                   "top-k experts were resident (Multi-MoE Table 1): its attention over all such steps, and its expert "
                                   "block (router, experts and the loads it waited for) per number of hits, with the layer-steps "
                                   "averaged in parentheses; – where none."),
                    {QStringLiteral("strategy"), QStringLiteral("attention")}, {}, {true, false}};
  if (steps == 0)
    table.caption += QStringLiteral(" No step of these runs ran a request alone (every step batched several tokens), or their backend "
                                    "does not time its layers (CUDA).");
  for (std::size_t h = 0; h < columns; ++h) {
    table.header << QStringLiteral("%1 resident").arg(h);  // of the top-k: k is no run's field
    table.left << false;
  }
  for (const std::string& s : d.strategies) {
    const auto& times = d.alone_layer_times.at(s);
    LayerTime all;
    for (const LayerTime& t : times) all += t;
    QStringList row{q(s), all.steps ? ms_layer(all.attention_seconds / static_cast<double>(all.steps)) : QStringLiteral("–")};
    for (std::size_t h = 0; h < columns; ++h) {
      const bool some = h < times.size() && times[h].steps > 0;
      row << (some ? QStringLiteral("%1 (%2)").arg(ms_layer(times[h].expert_seconds / static_cast<double>(times[h].steps))).arg(times[h].steps)
                   : QStringLiteral("–"));
    }
    table.rows << row;
  }
  return table;
}

std::vector<ReportTable> tables_of(const ReportData& d) {
  ReportTable latency{QStringLiteral("Table 1. Throughput and latency per strategy and arrival rate, means over repeats (Multi-MoE Table 2), "
                                     "± the standard deviation between the repeats where a rate has several. In a sweep every strategy serves "
                                     "the same arrivals in a repeat (seed + repeat), so the spread is between workloads, and strategies "
                                     "compared at one rate can differ by less than it and still differ."),
                      {QStringLiteral("strategy"), QStringLiteral("rate (req/s)"), QStringLiteral("runs"), QStringLiteral("throughput (req/min)"),
                       QStringLiteral("tokens/s"), QStringLiteral("TTFT mean (ms)"), QStringLiteral("TTFT p90 (ms)"),
                       QStringLiteral("turnaround mean (ms)"), QStringLiteral("turnaround p90 (ms)"), QStringLiteral("hit rate (%)"),
                       QStringLiteral("swap time (ms)")},
                      {},
                      {true, false, false, false, false, false, false, false, false, false, false},
                      2};
  for (const ReportPoint& p : d.points)
    latency.rows << QStringList{q(p.strategy), p.external ? QStringLiteral("—") : q(format_rate(p.rate)), QString::number(p.runs),
                                spread(p.requests_per_minute, p.requests_per_minute_sd, 1), spread(p.tokens_per_second, p.tokens_per_second_sd, 1),
                                spread(p.ttft_mean, p.ttft_mean_sd, 2, 1e3), ms(p.ttft_p90), spread(p.turnaround_mean, p.turnaround_mean_sd, 2, 1e3),
                                ms(p.turnaround_p90), percent(p.hit_rate), ms(p.swap_seconds)};

  std::size_t layers = 0;
  for (const auto& [s, rates] : d.layer_hit_rates) layers = std::max(layers, rates.size());
  ReportTable hits{QStringLiteral("Table 2. Expert hit rate (%) per MoE layer over every run of each strategy; "
                                  "– where a layer routes nothing (dense)."),
                   {QStringLiteral("strategy")}, {}, {true}};
  for (std::size_t l = 0; l < layers; ++l) {
    hits.header << QStringLiteral("layer %1").arg(l);
    hits.left << false;
  }
  for (const std::string& s : d.strategies) {
    QStringList row{q(s)};
    const auto& rates = d.layer_hit_rates.at(s);
    for (std::size_t l = 0; l < layers; ++l) row << (l < rates.size() ? percent(rates[l]) : QStringLiteral("–"));
    hits.rows << row;
  }

  ReportTable by_hits = layer_latency_table(d);

  ReportTable runs{QStringLiteral("Table 4. Every run: its arrival window and the drain after it, latency percentiles, and its expert "
                                  "loads by where their bytes were: in RAM, or read from disk under a host budget."),
                   {QStringLiteral("run"), QStringLiteral("strategy"), QStringLiteral("status"), QStringLiteral("rate (req/s)"), QStringLiteral("repeat"),
                    QStringLiteral("requests"), QStringLiteral("failed"), QStringLiteral("window (s)"), QStringLiteral("drain (s)"),
                    QStringLiteral("TTFT p50 (ms)"), QStringLiteral("TTFT p99 (ms)"), QStringLiteral("turnaround p99 (ms)"),
                    QStringLiteral("loads RAM / disk"), QStringLiteral("started (UTC)")},
                   {},
                   {false, true, true, false, false, false, false, false, false, false, false, false, false, true},
                   2};
  for (const ReportRun& r : d.runs)
    runs.rows << QStringList{QString::number(r.info.id), q(r.info.strategy), q(r.status()), r.external ? QStringLiteral("—") : q(format_rate(r.rate)), QString::number(r.repeat),
                             QString::number(r.summary.requests), QString::number(r.summary.failed), fmt(r.summary.window_seconds, 2),
                             fmt(r.summary.drain_seconds, 2), ms(r.summary.ttft.p50), ms(r.summary.ttft.p99),
                             ms(r.summary.turnaround.p99),
                             QStringLiteral("%1 / %2").arg(r.summary.loads - r.summary.disk_loads).arg(r.summary.disk_loads),
                             q(r.info.started_at).replace(QLatin1Char('T'), QLatin1Char(' ')).remove(QLatin1Char('Z'))};
  return {latency, hits, by_hits, runs};
}

QColor color_of(int i) {
  static const QColor palette[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xd6, 0x27, 0x28), QColor(0x2c, 0xa0, 0x2c),
                                   QColor(0xff, 0x7f, 0x0e), QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b),
                                   QColor(0xe3, 0x77, 0xc2), QColor(0x7f, 0x7f, 0x7f)};
  return palette[i % 8];
}

}  // namespace

ReportContent report_content(const ReportData& d) {
  ReportContent c;
  c.title = QStringLiteral("Mosaic QoS report");
  c.subtitle = QStringLiteral("%1 run%2 of %3 strateg%4 recorded in %5")
                   .arg(d.runs.size())
                   .arg(d.runs.size() == 1 ? QString() : QStringLiteral("s"))
                   .arg(d.strategies.size())
                   .arg(d.strategies.size() == 1 ? QStringLiteral("y") : QStringLiteral("ies"))
                   .arg(q(d.database));
  c.setup = setup_of(d);
  c.throughput_definition = QStringLiteral(
      "Throughput is as Multi-MoE measures it: the requests completed within the arrival window (from a run's start to its "
      "last arrival) per minute of that window. What finishes after the window is the drain, given per run in Table 4; when "
      "the engine saturates, the drain grows and throughput falls below the arrival rate.");
  // How the baselines are modelled, where the report has them.
  // A strategy is recorded as its kind, or as the kind followed by "+…" or " (…)" (the settings that
  // set it apart within its sweep); a name of the user's own says nothing of its kind.
  auto has = [&](const std::string& kind) {
    return std::any_of(d.strategies.begin(), d.strategies.end(), [&](const std::string& s) {
      return s == kind || (s.size() > kind.size() && s.compare(0, kind.size(), kind) == 0 && (s[kind.size()] == '+' || s[kind.size()] == ' '));
    });
  };
  if (has("space-sharing"))
    c.throughput_definition += QStringLiteral(
        " Space-sharing models MIG: each of N partitions holds 1/N of the budget and serves its own variant, and every step it "
        "runs is charged N times its measured compute and copies, as a slice with 1/N of the device's compute and copy "
        "bandwidth would take (%1).")
                                      .arg(std::all_of(d.runs.begin(), d.runs.end(), [](const ReportRun& r) { return r.clock == "simulated"; })
                                               ? QStringLiteral("priced so by the simulated device")
                                               : QStringLiteral("added to the virtual clock, slept on the real one"));
  if (has("single"))
    c.throughput_definition += QStringLiteral(
        " Single is the paper's single model: one variant serves every request, offloaded to the same resident capacity as the "
        "layouts (misses load the rest)%1.")
                                  .arg(has("single-resident") ? QStringLiteral("; single-resident keeps all of its experts and is the upper reference")
                                                              : QString());
  c.charts = charts_of(d);
  c.tables = tables_of(d);
  return c;
}

QString tables_note() {
  return QStringLiteral("every number as CSV and JSON (runs.csv, points.csv, layer_hit_rates.csv, layer_latency.csv, requests.csv, "
                        "report.json), each CSV column naming its unit (_s seconds, _per_s and _per_min rates, _bytes; report.json's "
                        "keys spell them out: _seconds, _per_second, _per_minute), hit rates as fractions, and _sd the standard "
                        "deviation between a rate's repeats.");
}

void draw_chart(QCustomPlot& plot, const ChartSpec& chart, int width) {
  // Shapes and dashes as well as colours: strategies that tie draw on top of one another, and a
  // hollow marker of another shape still shows around the one beneath it.
  static const QCPScatterStyle::ScatterShape shapes[] = {QCPScatterStyle::ssCircle, QCPScatterStyle::ssSquare, QCPScatterStyle::ssTriangle,
                                                         QCPScatterStyle::ssDiamond, QCPScatterStyle::ssCross, QCPScatterStyle::ssPlus,
                                                         QCPScatterStyle::ssTriangleInverted, QCPScatterStyle::ssStar};
  static const Qt::PenStyle dashes[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
  plot.clearPlottables();  // graphs and their error bars
  plot.xAxis->setLabel(chart.xlabel);
  plot.yAxis->setLabel(chart.ylabel);
  double xmax = 0, ymax = 0;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const int n = static_cast<int>(i);
    const ChartSeries& series = chart.series[i];
    QCPGraph* g = plot.addGraph();
    g->setName(series.name);
    g->setData(series.x, series.y);
    g->setPen(QPen(color_of(n), 1.6, dashes[n % 4]));
    g->setScatterStyle(QCPScatterStyle(shapes[n % 8], QPen(color_of(n), 1.4), Qt::NoBrush, 7 + 1.5 * (n % 3)));
    for (double v : series.x) xmax = std::max(xmax, v);
    for (qsizetype p = 0; p < series.y.size(); ++p) {
      const double top = series.y[p] + (p < series.error.size() && !std::isnan(series.error[p]) ? series.error[p] : 0);
      if (!std::isnan(top)) ymax = std::max(ymax, top);
    }
    if (has_spread(series)) {
      auto* bars = new QCPErrorBars(plot.xAxis, plot.yAxis);
      bars->removeFromLegend();
      bars->setDataPlottable(g);
      bars->setData(series.error);
      bars->setPen(QPen(color_of(n), 1.2));
      bars->setWhiskerWidth(8);
    }
  }
  if (chart.diagonal) {
    QCPGraph* g = plot.addGraph();
    g->setName(QStringLiteral("= arrival rate"));
    g->setData({0, xmax * 1.05}, {0, xmax * 1.05});
    g->setPen(QPen(Qt::gray, 1, Qt::DashLine));
    ymax = std::max(ymax, xmax);
  }
  if (chart.integer_x) {
    auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
    ticker->setTickStep(1.0);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    plot.xAxis->setTicker(ticker);
  }
  plot.xAxis->setRange(chart.integer_x ? -0.3 : 0, xmax > 0 ? xmax * 1.05 + (chart.integer_x ? 0.3 : 0) : 1);
  plot.yAxis->setRange(0, ymax > 0 ? ymax * 1.08 : 1);

  placeLegendBelow(plot, width);
}

}  // namespace mosaic::ui
