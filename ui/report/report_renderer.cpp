#include "report/report_renderer.h"

#include <QFile>
#include <QImage>
#include <QPainter>
#include <QPdfWriter>
#include <QTextDocument>
#include <QUrl>
#include "report/plot_export.h"
#include "report/qcustomplot_include.h"

#include <cmath>

#include "common/error.h"

namespace mosaic::ui {
namespace {

struct Series {
  QString name;
  QVector<double> x, y;
};

constexpr int kWidth = 900, kHeight = 520;

QColor color_of(int i) {
  static const QColor palette[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xd6, 0x27, 0x28), QColor(0x2c, 0xa0, 0x2c),
                                   QColor(0xff, 0x7f, 0x0e), QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b),
                                   QColor(0xe3, 0x77, 0xc2), QColor(0x7f, 0x7f, 0x7f)};
  return palette[i % 8];
}

QString q(const std::string& s) { return QString::fromStdString(s); }

// One line chart in PNG, SVG and PDF, named `stem`.
std::vector<std::filesystem::path> save_chart(const std::filesystem::path& dir, const QString& stem, const QString& title,
                                              const QString& xlabel, const QString& ylabel, const std::vector<Series>& series,
                                              bool diagonal = false, bool integer_x = false) {
  QCustomPlot plot;
  plot.resize(kWidth, kHeight);
  plot.plotLayout()->insertRow(0);
  plot.plotLayout()->addElement(0, 0, new QCPTextElement(&plot, title, QFont(QStringLiteral("Sans"), 12, QFont::Bold)));
  plot.xAxis->setLabel(xlabel);
  plot.yAxis->setLabel(ylabel);
  plot.legend->setVisible(true);
  plot.axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignBottom | Qt::AlignRight);
  double xmax = 0, ymax = 0;
  for (std::size_t i = 0; i < series.size(); ++i) {
    QCPGraph* g = plot.addGraph();
    g->setName(series[i].name);
    g->setData(series[i].x, series[i].y);
    g->setPen(QPen(color_of(static_cast<int>(i)), 2));
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 6));
    for (double v : series[i].x) xmax = std::max(xmax, v);
    for (double v : series[i].y) ymax = std::isnan(v) ? ymax : std::max(ymax, v);
  }
  if (diagonal) {  // throughput can never exceed the arrival rate
    QCPGraph* g = plot.addGraph();
    g->setName(QStringLiteral("arrival rate"));
    g->setData({0, xmax}, {0, xmax});
    g->setPen(QPen(Qt::gray, 1, Qt::DashLine));
    ymax = std::max(ymax, xmax);
  }
  if (integer_x) {  // layers are whole numbers
    auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
    ticker->setTickStep(1.0);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    plot.xAxis->setTicker(ticker);
  }
  plot.xAxis->setRange(integer_x ? -0.2 : 0, xmax > 0 ? xmax * 1.05 : 1);
  plot.yAxis->setRange(0, ymax > 0 ? ymax * 1.1 : 1);
  plot.replot();

  const auto base = dir / stem.toStdString();
  std::vector<std::filesystem::path> out;
  auto check = [&](bool ok, const std::filesystem::path& p) {
    if (!ok) throw IoError(p.string(), "", "cannot be written", "check that the report folder is writable");
    out.push_back(p);
  };
  const auto png = std::filesystem::path(base).replace_extension(".png");
  check(plot.savePng(q(png.string()), kWidth, kHeight), png);
  const auto pdf = std::filesystem::path(base).replace_extension(".pdf");
  check(plot.savePdf(q(pdf.string()), kWidth, kHeight), pdf);
  const auto svg = std::filesystem::path(base).replace_extension(".svg");
  check(savePlotSvg(plot, q(svg.string()), kWidth, kHeight, title), svg);
  return out;
}

QString fmt(double v, int digits = 3) { return std::isnan(v) ? QStringLiteral("–") : QString::number(v, 'f', digits); }

QString html_escape(const std::string& s) { return q(s).toHtmlEscaped(); }

}  // namespace

std::vector<std::filesystem::path> render_report(const ReportData& d, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(dir.string(), "", "cannot create the report folder: " + ec.message());

  std::vector<Series> throughput, ttft, turnaround, hits;
  for (const std::string& s : d.strategies) {
    Series t{q(s), {}, {}}, f{q(s), {}, {}}, a{q(s), {}, {}}, h{q(s), {}, {}};
    for (const ReportPoint& p : d.points) {
      if (p.strategy != s) continue;
      t.x.push_back(p.rate * 60);
      t.y.push_back(p.requests_per_minute);
      f.x.push_back(p.rate * 60);
      f.y.push_back(p.ttft_mean);
      a.x.push_back(p.rate * 60);
      a.y.push_back(p.turnaround_mean);
    }
    const auto& rates = d.layer_hit_rates.at(s);
    for (std::size_t l = 0; l < rates.size(); ++l)
      if (!std::isnan(rates[l])) {
        h.x.push_back(static_cast<double>(l));
        h.y.push_back(100 * rates[l]);
      }
    throughput.push_back(t);
    ttft.push_back(f);
    turnaround.push_back(a);
    hits.push_back(h);
  }
  std::vector<std::filesystem::path> files;
  auto add = [&](std::vector<std::filesystem::path> more) { files.insert(files.end(), more.begin(), more.end()); };
  const QString rate_label = QStringLiteral("arrival rate (requests/min)");
  add(save_chart(dir, QStringLiteral("throughput"), QStringLiteral("Throughput against arrival rate (Multi-MoE Fig. 4)"),
                 rate_label, QStringLiteral("throughput (requests/min)"), throughput, true));
  add(save_chart(dir, QStringLiteral("ttft"), QStringLiteral("Mean time to first token"), rate_label,
                 QStringLiteral("TTFT (s)"), ttft));
  add(save_chart(dir, QStringLiteral("turnaround"), QStringLiteral("Mean turnaround"), rate_label,
                 QStringLiteral("turnaround (s)"), turnaround));
  add(save_chart(dir, QStringLiteral("hit_rates"), QStringLiteral("Expert hit rate per layer (Multi-MoE Table 1)"),
                 QStringLiteral("layer"), QStringLiteral("hit rate (%)"), hits, false, true));

  QString html;
  html += QStringLiteral("<html><head><meta charset='utf-8'><title>Mosaic QoS report</title>"
                         "<style>body{font-family:sans-serif;margin:2em} table{border-collapse:collapse;margin:1em 0}"
                         " td,th{border:1px solid #bbb;padding:3px 8px;text-align:right} th{background:#eee}"
                         " td.s{text-align:left}</style></head><body>");
  html += QStringLiteral("<h1>Mosaic QoS report</h1><p>Database <code>%1</code>, %2 runs.").arg(html_escape(d.database)).arg(d.runs.size());
  if (!d.runs.empty())
    html += QStringLiteral(" Machine: %1. Build: %2. First run started %3.</p>")
                .arg(html_escape(d.runs.front().info.machine), html_escape(d.runs.front().info.build),
                     html_escape(d.runs.front().info.started_at));
  html += QStringLiteral("<h2>Throughput against arrival rate</h2><p>Throughput is as Multi-MoE measures it: the requests "
                         "completed within the arrival window (from a run's start to its last arrival) per minute of that "
                         "window. What finishes after the window is the drain, given per run in runs.csv; when the engine "
                         "saturates, the drain grows and throughput falls below the arrival rate.</p>"
                         "<img src='throughput.png' width='720'>");
  html += QStringLiteral("<h2>Latency per strategy (Multi-MoE Table 2)</h2><table><tr><th>strategy</th><th>rate (req/s)</th>"
                         "<th>runs</th><th>req/min</th><th>tok/s</th><th>TTFT mean (s)</th><th>TTFT p90 (s)</th>"
                         "<th>turnaround mean (s)</th><th>turnaround p90 (s)</th><th>hit rate</th><th>swap (s)</th></tr>");
  for (const ReportPoint& p : d.points)
    html += QStringLiteral("<tr><td class='s'>%1</td><td>%2</td><td>%3</td><td>%4</td><td>%5</td><td>%6</td><td>%7</td>"
                           "<td>%8</td><td>%9</td><td>%10</td><td>%11</td></tr>")
                .arg(html_escape(p.strategy), fmt(p.rate, 2), QString::number(p.runs), fmt(p.requests_per_minute, 1),
                     fmt(p.tokens_per_second, 1), fmt(p.ttft_mean, 4), fmt(p.ttft_p90, 4), fmt(p.turnaround_mean, 4),
                     fmt(p.turnaround_p90, 4))
                .arg(fmt(100 * p.hit_rate, 1) + QStringLiteral(" %"), fmt(p.swap_seconds, 3));
  html += QStringLiteral("</table><img src='ttft.png' width='560'><img src='turnaround.png' width='560'>");
  html += QStringLiteral("<h2>Expert hit rate per layer (Multi-MoE Table 1)</h2><table><tr><th>strategy</th>");
  std::size_t layers = 0;
  for (const auto& [s, rates] : d.layer_hit_rates) layers = std::max(layers, rates.size());
  for (std::size_t l = 0; l < layers; ++l) html += QStringLiteral("<th>layer %1</th>").arg(l);
  html += QStringLiteral("</tr>");
  for (const std::string& s : d.strategies) {
    html += QStringLiteral("<tr><td class='s'>%1</td>").arg(html_escape(s));
    const auto& rates = d.layer_hit_rates.at(s);
    for (std::size_t l = 0; l < layers; ++l)
      html += QStringLiteral("<td>%1</td>").arg(l < rates.size() && !std::isnan(rates[l]) ? fmt(100 * rates[l], 1) + QStringLiteral(" %") : QStringLiteral("–"));
    html += QStringLiteral("</tr>");
  }
  html += QStringLiteral("</table><img src='hit_rates.png' width='720'>");
  html += QStringLiteral("<h2>Runs</h2><table><tr><th>run</th><th>strategy</th><th>rate</th><th>repeat</th><th>requests</th>"
                         "<th>failed</th><th>TTFT p50</th><th>TTFT p99</th><th>turnaround p99</th><th>started</th></tr>");
  for (const ReportRun& r : d.runs)
    html += QStringLiteral("<tr><td>%1</td><td class='s'>%2</td><td>%3</td><td>%4</td><td>%5</td><td>%6</td><td>%7</td>"
                           "<td>%8</td><td>%9</td><td class='s'>%10</td></tr>")
                .arg(QString::number(r.info.id), html_escape(r.info.strategy), fmt(r.rate, 2), QString::number(r.repeat),
                     QString::number(r.summary.requests), QString::number(r.summary.failed), fmt(r.summary.ttft.p50, 4),
                     fmt(r.summary.ttft.p99, 4), fmt(r.summary.turnaround.p99, 4))
                .arg(html_escape(r.info.started_at));
  html += QStringLiteral("</table><p>Tables as CSV and JSON beside this page: runs.csv, points.csv, "
                         "layer_hit_rates.csv, requests.csv, report.json.</p></body></html>");

  const auto html_path = dir / "report.html";
  {
    QFile f(q(html_path.string()));
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) throw IoError(html_path.string(), "", "cannot be written");
    f.write(html.toUtf8());
  }
  files.push_back(html_path);

  // The same page as a PDF, with the chart images embedded.
  QTextDocument doc;
  for (const char* chart : {"throughput.png", "ttft.png", "turnaround.png", "hit_rates.png"})
    doc.addResource(QTextDocument::ImageResource, QUrl(QString::fromLatin1(chart)),
                    QImage(q((dir / chart).string())).scaledToWidth(560, Qt::SmoothTransformation));
  QString pdf_html = html;
  pdf_html.replace(QStringLiteral("width='720'"), QStringLiteral("width='560'"));
  doc.setHtml(pdf_html);
  const auto pdf_path = dir / "report.pdf";
  {
    QPdfWriter writer(q(pdf_path.string()));
    writer.setPageSize(QPageSize(QPageSize::A4));
    writer.setResolution(96);
    writer.setTitle(QStringLiteral("Mosaic QoS report"));
    doc.setPageSize(QSizeF(writer.width(), writer.height()));
    doc.print(&writer);
  }
  if (!QFile::exists(q(pdf_path.string()))) throw IoError(pdf_path.string(), "", "cannot be written");
  files.push_back(pdf_path);
  return files;
}

}  // namespace mosaic::ui
