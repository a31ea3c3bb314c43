#include "report/report_renderer.h"

#include <QFile>

#include "common/error.h"
#include "report/plot_export.h"
#include "report/qcustomplot_include.h"
#include "report/report_content.h"
#include "report/report_pdf.h"
#include "report/qt_text.h"

namespace mosaic::ui {
namespace {

constexpr int kChartWidth = 900, kChartHeight = 520;


// One chart, titled, in PNG, SVG and PDF, named by its stem.
std::vector<std::filesystem::path> save_chart(const std::filesystem::path& dir, const ChartSpec& chart) {
  QCustomPlot plot;
  plot.resize(kChartWidth, kChartHeight);
  plot.plotLayout()->insertRow(0);
  plot.plotLayout()->addElement(0, 0, new QCPTextElement(&plot, chart.title, QFont(QStringLiteral("Sans"), 12, QFont::Bold)));
  draw_chart(plot, chart, kChartWidth);
  plot.replot();

  const auto base = dir / chart.stem.toStdString();
  std::vector<std::filesystem::path> out;
  auto check = [&](bool ok, const std::filesystem::path& p) {
    if (!ok) throw IoError(p.string(), "", "cannot be written", "check that the report folder is writable");
    out.push_back(p);
  };
  const auto png = std::filesystem::path(base).replace_extension(".png");
  check(plot.savePng(q(png.string()), kChartWidth, kChartHeight), png);
  const auto pdf = std::filesystem::path(base).replace_extension(".pdf");
  check(plot.savePdf(q(pdf.string()), kChartWidth, kChartHeight), pdf);
  const auto svg = std::filesystem::path(base).replace_extension(".svg");
  check(savePlotSvg(plot, q(svg.string()), kChartWidth, kChartHeight, chart.title), svg);
  return out;
}

QString html_table(const ReportTable& t) {
  QString html = QStringLiteral("<table><caption>%1</caption><tr>").arg(t.caption.toHtmlEscaped());
  for (int c = 0; c < t.header.size(); ++c)
    html += QStringLiteral("<th class='%1'>%2</th>").arg(t.left.value(c) ? QStringLiteral("s") : QStringLiteral("n"), t.header[c].toHtmlEscaped());
  html += QStringLiteral("</tr>");
  for (const QStringList& row : t.rows) {
    html += QStringLiteral("<tr>");
    for (int c = 0; c < row.size(); ++c)
      html += QStringLiteral("<td class='%1'>%2</td>").arg(t.left.value(c) ? QStringLiteral("s") : QStringLiteral("n"), row[c].toHtmlEscaped());
    html += QStringLiteral("</tr>");
  }
  return html + QStringLiteral("</table>");
}

QString html_figure(const ChartSpec& chart, int number, int width) {
  return QStringLiteral("<figure><img src='%1.svg' width='%2' alt='%3'><figcaption>Figure %4. %3. %5</figcaption></figure>")
      .arg(chart.stem)
      .arg(width)
      .arg(chart.title.toHtmlEscaped())
      .arg(number)
      .arg(chart.caption.toHtmlEscaped());
}

QString html_page(const ReportContent& c) {
  QString html = QStringLiteral(
      "<!DOCTYPE html><html><head><meta charset='utf-8'><title>%1</title><style>"
      "body{font-family:'DejaVu Sans',sans-serif;max-width:62em;margin:2em auto;padding:0 1em;color:#111;line-height:1.4}"
      "h1{margin-bottom:0} .sub{color:#555;margin-top:.2em} dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}"
      "dt{font-weight:bold} dd{margin:0} table{border-collapse:collapse;margin:1em 0;font-size:90%}"
      "caption{text-align:left;padding-bottom:.4em} th{border-bottom:1px solid #000;vertical-align:bottom;padding:2px 8px}"
      "table{border-top:2px solid #000;border-bottom:2px solid #000} td{padding:2px 8px;white-space:nowrap}"
      ".n{text-align:right} .s{text-align:left} figure{display:inline-block;margin:.5em 1em .5em 0;vertical-align:top}"
      "figcaption{font-style:italic;font-size:85%;max-width:40em}</style></head><body>")
                     .arg(c.title.toHtmlEscaped());
  html += QStringLiteral("<h1>%1</h1><p class='sub'>%2</p><h2>Setup</h2><dl>").arg(c.title.toHtmlEscaped(), c.subtitle.toHtmlEscaped());
  for (const auto& [k, v] : c.setup) html += QStringLiteral("<dt>%1</dt><dd>%2</dd>").arg(k.toHtmlEscaped(), v.toHtmlEscaped());
  html += QStringLiteral("</dl><h2>Throughput</h2><p>%1</p>").arg(c.throughput_definition.toHtmlEscaped());
  html += html_figure(c.charts[0], 1, 760);
  html += QStringLiteral("<h2>Latency</h2>") + html_table(c.tables[0]) + html_figure(c.charts[1], 2, 470) + html_figure(c.charts[2], 3, 470);
  html += QStringLiteral("<h2>Expert hit rates</h2>") + html_table(c.tables[1]) + html_figure(c.charts[3], 4, 600);
  html += QStringLiteral("<h2>Latency of a layer by hits</h2>") + html_table(c.tables[2]);
  html += QStringLiteral("<h2>Runs</h2>") + html_table(c.tables[3]);
  html += QStringLiteral("<p class='sub'>Beside this page: report.pdf (the same report), the charts as PNG, SVG and PDF, and ") +
          tables_note().toHtmlEscaped() + QStringLiteral("</p></body></html>");
  return html;
}

}  // namespace

std::vector<std::filesystem::path> render_report(const ReportData& d, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(dir.string(), "", "cannot create the report folder: " + ec.message());

  const ReportContent content = report_content(d);
  std::vector<std::filesystem::path> files;
  for (const ChartSpec& chart : content.charts) {
    const auto more = save_chart(dir, chart);
    files.insert(files.end(), more.begin(), more.end());
  }
  const auto html_path = dir / "report.html";
  {
    QFile f(q(html_path.string()));
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) throw IoError(html_path.string(), "", "cannot be written");
    f.write(html_page(content).toUtf8());
  }
  files.push_back(html_path);
  const auto pdf_path = dir / "report.pdf";
  write_report_pdf(content, pdf_path);
  files.push_back(pdf_path);
  return files;
}

}  // namespace mosaic::ui
