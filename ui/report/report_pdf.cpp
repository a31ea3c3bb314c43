#include "report/report_pdf.h"

#include <QFile>
#include <QPdfWriter>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "common/error.h"
#include "report/qcustomplot_include.h"
#include "report/report_content.h"

namespace mosaic::ui {
namespace {

// The writer at 72 dpi: one unit is one point, so fonts given in points and the charts' pens and
// markers keep the proportions they have on screen. Everything drawn is vector, whatever the unit.
constexpr double kPageWidth = 595, kPageHeight = 842, kMargin = 54;
constexpr double kWidth = kPageWidth - 2 * kMargin;
const QString kFamily = QStringLiteral("DejaVu Sans");

QFont font(double points, bool bold = false, bool italic = false) {
  QFont f(kFamily);
  f.setPointSizeF(points);
  f.setBold(bold);
  f.setItalic(italic);
  return f;
}

// Lays blocks down the page, starting a new one when the next block does not fit.
class Flow {
 public:
  Flow(QPdfWriter& writer, QCPPainter& painter) : writer_(writer), p_(painter) { footer(); }

  double width() const { return kWidth; }
  QCPPainter& painter() { return p_; }
  double y() const { return y_; }
  void advance(double h) { y_ += h; }

  // Starts a page unless `h` more points fit on this one.
  void need(double h) {
    if (y_ + h <= kPageHeight - kMargin) return;
    writer_.newPage();
    y_ = kMargin;
    footer();
  }

  double text_height(const QString& text, const QFont& f, double w) {
    p_.setFont(f);
    return p_.boundingRect(QRectF(0, 0, w, 1e6), Qt::TextWordWrap, text).height();
  }

  void paragraph(const QString& text, const QFont& f, double gap_after = 6, QColor color = Qt::black) {
    const double h = text_height(text, f, kWidth);
    need(h);
    p_.setPen(color);
    p_.drawText(QRectF(kMargin, y_, kWidth, h), Qt::TextWordWrap | Qt::AlignLeft | Qt::AlignTop, text);
    y_ += h + gap_after;
  }

  // A section heading stays with the start of what follows it.
  void heading(const QString& text) {
    need(90);
    y_ += 8;
    paragraph(text, font(11, true), 4);
  }

  void rule(double thickness, double x = kMargin, double w = kWidth) {
    p_.setPen(QPen(Qt::black, thickness));
    p_.drawLine(QPointF(x, y_), QPointF(x + w, y_));
  }
  void set_y(double y) { y_ = y; }

 private:
  void footer() {
    ++page_;
    p_.setFont(font(7));
    p_.setPen(QColor(0x66, 0x66, 0x66));
    p_.drawText(QRectF(kMargin, kPageHeight - kMargin + 14, kWidth, 12), Qt::AlignHCenter | Qt::AlignTop,
                QStringLiteral("Mosaic QoS report · page %1").arg(page_));
  }

  QPdfWriter& writer_;
  QCPPainter& p_;
  double y_ = kMargin;
  int page_ = 0;
};

// "what   value" rows, the value wrapping in its column.
void key_values(Flow& flow, const QList<QPair<QString, QString>>& rows) {
  const QFont key = font(8.5, true), value = font(8.5);
  double key_width = 0;
  flow.painter().setFont(key);
  for (const auto& [k, v] : rows) key_width = std::max(key_width, flow.painter().fontMetrics().horizontalAdvance(k) + 10.0);
  for (const auto& [k, v] : rows) {
    const double h = flow.text_height(v, value, flow.width() - key_width);
    flow.need(h);
    QCPPainter& p = flow.painter();
    p.setPen(Qt::black);
    p.setFont(key);
    p.drawText(QRectF(kMargin, flow.y(), key_width, h), Qt::AlignLeft | Qt::AlignTop, k);
    p.setFont(value);
    p.drawText(QRectF(kMargin + key_width, flow.y(), flow.width() - key_width, h), Qt::TextWordWrap | Qt::AlignLeft | Qt::AlignTop, v);
    flow.advance(h + 2);
  }
  flow.advance(4);
}

// One figure at (x, y), `w` × `h`, with its numbered caption beneath; returns the caption's height.
double figure_at(Flow& flow, const ChartSpec& chart, int number, double x, double y, double w, double h, double caption_height) {
  QCustomPlot plot;
  plot.setFont(font(8));
  plot.xAxis->setLabelFont(font(8));
  plot.yAxis->setLabelFont(font(8));
  plot.xAxis->setTickLabelFont(font(7));
  plot.yAxis->setTickLabelFont(font(7));
  plot.legend->setFont(font(7));
  draw_chart(plot, chart, static_cast<int>(w));
  QCPPainter& p = flow.painter();
  p.save();
  p.translate(x, y);
  plot.toPainter(&p, static_cast<int>(w), static_cast<int>(h));
  p.restore();
  p.setFont(font(7.5, false, true));
  p.setPen(Qt::black);
  p.drawText(QRectF(x, y + h + 2, w, caption_height), Qt::TextWordWrap | Qt::AlignLeft | Qt::AlignTop,
             QStringLiteral("Figure %1. %2. %3").arg(number).arg(chart.title, chart.caption));
  return caption_height;
}

double caption_height_of(Flow& flow, const ChartSpec& chart, int number, double w) {
  return flow.text_height(QStringLiteral("Figure %1. %2. %3").arg(number).arg(chart.title, chart.caption), font(7.5, false, true), w);
}

// Figures side by side in one row, centred in `fraction` of the width.
void figures(Flow& flow, const std::vector<const ChartSpec*>& charts, int& number, double height, double fraction = 1.0) {
  const double gap = 14, each = (flow.width() * fraction - gap * static_cast<double>(charts.size() - 1)) / static_cast<double>(charts.size());
  double caption_height = 0;
  for (std::size_t i = 0; i < charts.size(); ++i)
    caption_height = std::max(caption_height, caption_height_of(flow, *charts[i], number + static_cast<int>(i), each));
  flow.need(height + caption_height + 10);
  for (std::size_t i = 0; i < charts.size(); ++i) {
    const double x = kMargin + (flow.width() - flow.width() * fraction) / 2 + static_cast<double>(i) * (each + gap);
    figure_at(flow, *charts[i], number + static_cast<int>(i), x, flow.y(), each, height, caption_height);
  }
  number += static_cast<int>(charts.size());
  flow.advance(height + caption_height + 14);
}

// A booktabs table: rules above, under the header and below; no vertical lines. Columns are as
// wide as their widest cell or the longest word of their header, so nothing breaks mid-word; a
// table too wide for the page is set in a smaller type.
struct TableLayout {
  QFont body, head;
  std::vector<double> widths;
  double width = 0, caption_height = 0, header_height = 0, row_height = 0;
  static constexpr double kPad = 4;
  double height(int rows) const { return caption_height + 3 + header_height + kPad + 2 + rows * row_height + 15; }
};

// `spread`: room to spare goes to every column alike, up to half as wide again, so headers wrap less.
TableLayout measure(Flow& flow, const ReportTable& t, double caption_width, bool spread = true) {
  QCPPainter& p = flow.painter();
  const double pad = TableLayout::kPad;
  const int columns = static_cast<int>(t.header.size());
  TableLayout l;
  for (double size = 7.5;; size -= 0.5) {
    l.body = font(size);
    l.head = font(size, true);
    l.widths.assign(static_cast<std::size_t>(columns), 0);
    p.setFont(l.head);
    for (int c = 0; c < columns; ++c)
      for (const QString& word : t.header[c].split(QLatin1Char(' ')))
        l.widths[c] = std::max(l.widths[c], p.fontMetrics().horizontalAdvance(word) + 2 * pad + 1);
    p.setFont(l.body);
    for (const QStringList& row : t.rows)
      for (int c = 0; c < columns && c < row.size(); ++c) l.widths[c] = std::max(l.widths[c], p.fontMetrics().horizontalAdvance(row[c]) + 2 * pad + 1);
    l.width = 0;
    for (double w : l.widths) l.width += w;
    if (l.width <= flow.width() || size <= 5.5) {
      const double spare = !spread ? 0.0 : std::max(0.0, std::min(flow.width() - l.width, l.width * 0.5)) / columns;
      for (double& w : l.widths) w += spare;
      l.width += spare * columns;
      break;
    }
  }
  for (int c = 0; c < columns; ++c) l.header_height = std::max(l.header_height, flow.text_height(t.header[c], l.head, l.widths[c] - 2 * pad));
  l.header_height += 2 * pad - 2;
  l.row_height = QFontMetricsF(l.body, p.device()).height() + 4;
  l.caption_height = flow.text_height(t.caption, font(8), caption_width);
  return l;
}

// Draws at `x`; when the rows run past the page, the rest follows on the next under the header again.
void draw_table(Flow& flow, const ReportTable& t, const TableLayout& l, double x, double caption_width) {
  QCPPainter& p = flow.painter();
  const double pad = TableLayout::kPad;
  const int columns = static_cast<int>(t.header.size());
  auto draw_header = [&] {
    flow.rule(0.9, x, l.width);
    double cx = x;
    p.setFont(l.head);
    p.setPen(Qt::black);
    for (int c = 0; c < columns; ++c) {
      p.drawText(QRectF(cx + pad, flow.y() + pad - 1, l.widths[c] - 2 * pad, l.header_height),
                 Qt::TextWordWrap | Qt::AlignBottom | (t.left.value(c) ? Qt::AlignLeft : Qt::AlignRight), t.header[c]);
      cx += l.widths[c];
    }
    flow.advance(l.header_height + pad);
    flow.rule(0.5, x, l.width);
    flow.advance(2);
  };
  flow.need(l.height(std::min<int>(3, static_cast<int>(t.rows.size()))));
  p.setFont(font(8));
  p.setPen(Qt::black);
  p.drawText(QRectF(x, flow.y(), caption_width, l.caption_height), Qt::TextWordWrap | Qt::AlignLeft | Qt::AlignTop, t.caption);
  flow.advance(l.caption_height + 3);
  draw_header();
  for (int r = 0; r < t.rows.size(); ++r) {
    if (flow.y() + l.row_height + 2 > kPageHeight - kMargin) {
      flow.rule(0.9, x, l.width);
      flow.need(kPageHeight);  // a new page
      draw_header();
    }
    double cx = x;
    p.setFont(l.body);
    p.setPen(Qt::black);
    for (int c = 0; c < columns && c < t.rows[r].size(); ++c) {
      p.drawText(QRectF(cx + pad, flow.y(), l.widths[c] - 2 * pad, l.row_height),
                 Qt::AlignVCenter | (t.left.value(c) ? Qt::AlignLeft : Qt::AlignRight), t.rows[r][c]);
      cx += l.widths[c];
    }
    flow.advance(l.row_height);
  }
  flow.advance(1);
  flow.rule(0.9, x, l.width);
  flow.advance(14);
}

// The columns `columns` of `t` (its key columns first), captioned as a part of it after the first.
ReportTable columns_of(const ReportTable& t, const std::vector<int>& columns, bool first) {
  ReportTable part;
  part.key_columns = std::min(t.key_columns, static_cast<int>(columns.size()));
  const QString number = t.caption.section(QLatin1Char('.'), 0, 0);  // "Table 2"
  part.caption = first ? t.caption
                       : QStringLiteral("%1, continued: %2 to %3.").arg(number, t.header.value(columns[std::min(static_cast<std::size_t>(std::max(t.key_columns, 0)), columns.size() - 1)]),
                                                                          t.header.value(columns.back()));
  for (int c : columns) {
    part.header << t.header.value(c);
    part.left << t.left.value(c);
  }
  for (const QStringList& row : t.rows) {
    QStringList cells;
    for (int c : columns) cells << row.value(c);
    part.rows << cells;
  }
  return part;
}

// A table wider than the page even in small type (a 32-layer model's hit rates, large latencies)
// is set in parts, one under the other: its key columns, then as many of the rest as fit at a
// readable size. Nothing runs off the page.
void table(Flow& flow, const ReportTable& t) {
  TableLayout whole = measure(flow, t, flow.width());
  const int columns = static_cast<int>(t.header.size());
  if (whole.width <= flow.width() || columns < 2) return draw_table(flow, t, whole, kMargin, flow.width());
  const int keys = std::clamp(t.key_columns, 0, columns - 1);
  constexpr double kReadable = 6.5;  // points: the smallest type a part is set in
  auto fits = [&](const std::vector<int>& cols) {
    const TableLayout l = measure(flow, columns_of(t, cols, true), flow.width(), /*spread=*/false);
    return l.width <= flow.width() && l.body.pointSizeF() >= kReadable;
  };
  std::vector<int> key_cols(static_cast<std::size_t>(keys));
  std::iota(key_cols.begin(), key_cols.end(), 0);
  // As many columns a part as fit, first; then the same number of parts made even (15 + 15 + 2
  // layers read worse than 11 + 11 + 10), where each even part fits too.
  std::vector<std::vector<int>> parts;
  for (int c = keys; c < columns;) {
    std::vector<int> cols = key_cols;
    cols.push_back(c++);  // at least one column a part, however wide
    while (c < columns) {
      cols.push_back(c);
      if (!fits(cols)) {
        cols.pop_back();
        break;
      }
      ++c;
    }
    parts.push_back(cols);
  }
  const int rest = columns - keys, count = static_cast<int>(parts.size());
  std::vector<std::vector<int>> even;
  for (int i = 0, c = keys; i < count; ++i) {
    std::vector<int> cols = key_cols;
    for (int n = rest / count + (i < rest % count ? 1 : 0); n > 0; --n) cols.push_back(c++);
    even.push_back(cols);
  }
  if (std::all_of(even.begin(), even.end(), fits)) parts = even;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const ReportTable part = columns_of(t, parts[i], i == 0);
    draw_table(flow, part, measure(flow, part, flow.width()), kMargin, flow.width());
  }
}

// A narrow table with its figure beside it, so that neither leaves half the page empty; one under
// the other when the table is too wide for that.
void table_beside_figure(Flow& flow, const ReportTable& t, const ChartSpec& chart, int& number, double height) {
  const double gap = 18;
  TableLayout l = measure(flow, t, flow.width() * 0.45, /*spread=*/false);
  if (l.width > flow.width() * 0.45) {
    table(flow, t);
    figures(flow, {&chart}, number, height, 0.7);
    return;
  }
  l.width = std::max(l.width, flow.width() * 0.3);  // room for its caption
  l.widths.back() += l.width - std::accumulate(l.widths.begin(), l.widths.end(), 0.0);
  l.caption_height = flow.text_height(t.caption, font(8), l.width);
  const double figure_width = flow.width() - l.width - gap;
  const double caption = caption_height_of(flow, chart, number, figure_width);
  flow.need(std::max(l.height(static_cast<int>(t.rows.size())), height + caption + 14));
  const double top = flow.y();
  figure_at(flow, chart, number, kMargin + l.width + gap, top, figure_width, height, caption);
  ++number;
  draw_table(flow, t, l, kMargin, l.width);
  flow.set_y(std::max(flow.y(), top + height + caption + 14));
}

}  // namespace

void write_report_pdf(const ReportContent& c, const std::filesystem::path& file) {
  const QString path = QString::fromStdString(file.string());
  {
    QPdfWriter writer(path);
    writer.setPageSize(QPageSize(QPageSize::A4));
    writer.setPageMargins(QMarginsF(0, 0, 0, 0));
    writer.setResolution(72);
    writer.setTitle(c.title);
    writer.setCreator(QStringLiteral("Mosaic"));
    QCPPainter painter;
    if (!painter.begin(&writer)) throw IoError(file.string(), "", "cannot be written", "check that the report folder is writable");
    painter.setMode(QCPPainter::pmVectorized);
    painter.setMode(QCPPainter::pmNoCaching);
    painter.setMode(QCPPainter::pmNonCosmetic);
    painter.setRenderHint(QPainter::Antialiasing);
    Flow flow(writer, painter);
    flow.paragraph(c.title, font(17, true), 2);
    flow.paragraph(c.subtitle, font(8.5), 6, QColor(0x55, 0x55, 0x55));
    flow.rule(0.6);
    flow.advance(8);
    flow.heading(QStringLiteral("Setup"));
    key_values(flow, c.setup);

    int figure = 1;
    const auto& charts = c.charts;  // throughput, ttft, turnaround, hit_rates
    flow.heading(QStringLiteral("Throughput"));
    flow.paragraph(c.throughput_definition, font(8.5));
    figures(flow, {&charts[0]}, figure, 250, 0.85);
    flow.heading(QStringLiteral("Latency"));
    table(flow, c.tables[0]);
    figures(flow, {&charts[1], &charts[2]}, figure, 200);
    flow.heading(QStringLiteral("Expert hit rates"));
    table_beside_figure(flow, c.tables[1], charts[3], figure, 180);
    flow.heading(QStringLiteral("Latency of a layer by hits"));
    table(flow, c.tables[2]);
    flow.heading(QStringLiteral("Runs"));
    table(flow, c.tables[3]);
    flow.paragraph(QStringLiteral("Beside this file: report.html (the same report), the charts as PNG, SVG and PDF, and ") + tables_note(),
                   font(7.5), 0, QColor(0x55, 0x55, 0x55));
    painter.end();
  }
  if (!QFile::exists(path) || QFile(path).size() == 0)
    throw IoError(file.string(), "", "cannot be written", "check that the report folder is writable");
}

}  // namespace mosaic::ui
