#include "workbench/chart.h"
#include "workbench/file_dialogs.h"

#include <QContextMenuEvent>
#include <QFileDialog>
#include <QMenu>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>

#include "report/plot_export.h"

namespace mosaic::ui {

Chart::Chart(const QString& title, const QString& xLabel, const QString& yLabel, QWidget* parent)
    : QCustomPlot(parent), title_(title), linear_ticker_(yAxis->ticker()) {
  setMinimumSize(260, 180);
  xAxis->setLabel(xLabel);
  yAxis->setLabel(yLabel);
  legend->setFont(QFont(font().family(), 8));
  placeLegendBelow(*this, width());  // styled and moved under the axes once
  layOutLegend();
  setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  setMouseTracking(true);
  // A marker's name reads along its line: shown only where the plot's height holds all of it.
  connect(this, &QCustomPlot::afterLayout, this, [this] {
    const int room = axisRect()->height();
    for (const QPointer<QCPItemText>& name : marker_names_)
      if (name) name->setVisible(QFontMetrics(name->font()).horizontalAdvance(name->text()) <= room);
  });
  setToolTip(QString());
  // A click toggles the entry's series, and the series of its group with it (a run's TTFT and
  // turnaround share one entry).
  connect(this, &QCustomPlot::legendClick, this, [this](QCPLegend*, QCPAbstractLegendItem* item, QMouseEvent*) {
    auto* entry = qobject_cast<QCPPlottableLegendItem*>(item);
    if (entry == nullptr) return;
    const bool show = !entry->plottable()->visible();
    const QVariant group = entry->plottable()->property(kGroup);
    for (int i = 0; i < plottableCount(); ++i)
      if (plottable(i) == entry->plottable() || (group.isValid() && plottable(i)->property(kGroup) == group)) setSeriesVisible(i, show);
  });
}

Chart::~Chart() {
  // An empty chart's legend is out of the layout (layOutLegend): back in it, QCustomPlot deletes it
  // with the layout as it always does, rather than as a plain child after the plot is gone.
  placeLegendBelow(*this, width());
}

void Chart::addMarker(double x, const QString& name, const QColor& color) {
  auto* line = new QCPItemStraightLine(this);
  line->point1->setCoords(x, 0);
  line->point2->setCoords(x, 1);
  line->setPen(QPen(QColor(0x99, 0x99, 0x99), 1, Qt::DashLine));
  auto* label = new QCPItemText(this);
  label->position->setTypeX(QCPItemPosition::ptPlotCoords);
  label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
  label->position->setCoords(x, 0.97);
  label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);  // rotated: reads upwards from the foot, right of the line
  label->setRotation(-90);
  label->setFont(QFont(font().family(), 7));
  label->setColor(color);
  label->setText(QStringLiteral(" %1 ").arg(name));
  marker_names_.removeAll(nullptr);
  marker_names_.push_back(label);
}

int Chart::visibleMarkerNames() const {
  return static_cast<int>(std::count_if(marker_names_.begin(), marker_names_.end(), [](const QPointer<QCPItemText>& n) { return n && n->visible(); }));
}

void Chart::setLogScale(bool on) {
  yAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  if (on) yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
  else yAxis->setTicker(linear_ticker_);
  fit();
}

bool Chart::logScale() const { return yAxis->scaleType() == QCPAxis::stLogarithmic; }

void Chart::setSeriesVisible(int index, bool visible) {
  QCPAbstractPlottable* p = plottable(index);
  if (p == nullptr) return;
  p->setVisible(visible);
  if (QCPPlottableLegendItem* item = legend->itemWithPlottable(p)) item->setTextColor(visible ? Qt::black : QColor(0xaa, 0xaa, 0xaa));
  replot(QCustomPlot::rpQueuedReplot);
}

QString Chart::readout(const QPoint& pos) {
  double best = selectionTolerance() + 1;
  QString text;
  for (int i = 0; i < plottableCount(); ++i) {
    QCPAbstractPlottable* p = plottable(i);
    if (!p->visible() || p->interface1D() == nullptr) continue;
    QVariant details;
    const double d = p->selectTest(pos, false, &details);
    if (d < 0 || d >= best) continue;
    const QCPDataSelection hit = details.value<QCPDataSelection>();
    if (hit.isEmpty()) continue;
    const int index = hit.dataRange(0).begin();
    best = d;
    text = QStringLiteral("%1\n%2: %L3\n%4: %L5")
               .arg(p->name(), xAxis->label())
               .arg(p->interface1D()->dataMainKey(index), 0, 'g', 4)
               .arg(yAxis->label())
               .arg(p->interface1D()->dataMainValue(index), 0, 'g', 4);
  }
  return text;
}

QString Chart::exportTo(const QString& file) {
  const QString error = exportPlot(*this, file, title_);
  Q_EMIT exported(error.isEmpty() ? tr("Wrote %1").arg(file) : error);
  return error;
}

void Chart::fit() {
  bool any = false;
  for (int i = 0; i < plottableCount(); ++i)
    if (plottable(i)->visible()) {
      plottable(i)->rescaleAxes(any);
      any = true;
    }
  if (logScale() && yAxis->range().lower <= 0) yAxis->setRangeLower(yAxis->range().upper / 1e4);
  if (!logScale() && any) yAxis->setRangeLower(std::min(0.0, yAxis->range().lower));
  if (any) {
    xAxis->scaleRange(1.04, xAxis->range().center());
    if (xAxis->range().lower > 0) xAxis->setRangeLower(0);  // times and counts read from zero
    yAxis->setRangeUpper(logScale() ? yAxis->range().upper * 1.5 : yAxis->range().upper * 1.06);
  }
  layOutLegend();
  replot(QCustomPlot::rpQueuedReplot);
}

void Chart::layOutLegend() {
  // Only with entries (the legend's grid counts empty cells among its items). And an empty legend
  // is taken out of the layout, not only hidden: QCustomPlot's grid caps a column at the smallest
  // largest size of what it holds, hidden or not, and an empty legend's largest is its margins, so
  // an empty chart drew its axes a few pixels wide, the placeholder a column of single words
  // (found at 1366×768 and 1920×1080, 2026-12-01).
  bool entries = false;
  for (int i = 0; i < plottableCount(); ++i) entries = entries || legend->hasItemWithPlottable(plottable(i));
  if (entries) {
    placeLegendBelow(*this, width());
  } else if (plotLayout()->elements(false).contains(legend)) {
    plotLayout()->take(legend);
    plotLayout()->simplify();
  }
  legend->setVisible(entries);
}

void Chart::mouseMoveEvent(QMouseEvent* event) {
  QCustomPlot::mouseMoveEvent(event);
  const QString text = readout(event->pos());
  if (text.isEmpty()) QToolTip::hideText();
  else QToolTip::showText(event->globalPosition().toPoint(), text, this);
}

void Chart::contextMenuEvent(QContextMenuEvent* event) {
  QMenu menu(this);
  QAction* log = menu.addAction(tr("Log scale"));
  log->setCheckable(true);
  log->setChecked(logScale());
  connect(log, &QAction::toggled, this, &Chart::setLogScale);
  menu.addAction(tr("Fit to data"), this, &Chart::fit);
  menu.addAction(tr("Show every series"), this, [this] {
    for (int i = 0; i < plottableCount(); ++i) setSeriesVisible(i, true);
    fit();
  });
  menu.addSeparator();
  menu.addAction(tr("Export chart…"), this, [this] {
    const QString file = remembered(QFileDialog::getSaveFileName(this, tr("Export the chart"), inStartFolder(title_ + QStringLiteral(".png")),
                                                                 tr("PNG image (*.png);;SVG drawing (*.svg);;PDF document (*.pdf)")));
    if (!file.isEmpty()) exportTo(file);
  });
  menu.exec(event->globalPos());
}

void Chart::setPlaceholder(const QString& text) {
  placeholder_ = text;
  update();
}

bool Chart::hasData() const {
  auto& plot = const_cast<Chart&>(*this);  // QCustomPlot has no const access to its plottables
  for (int i = 0; i < plot.plottableCount(); ++i)
    if (const QCPPlottableInterface1D* data = plot.plottable(i)->interface1D(); data && data->dataCount() > 0) return true;
  return false;
}

void Chart::paintEvent(QPaintEvent* event) {
  QCustomPlot::paintEvent(event);
  if (placeholder_.isEmpty() || hasData()) return;
  QPainter p(this);
  p.setPen(QColor(0x80, 0x80, 0x80));
  QFont f = font();
  f.setPointSizeF(f.pointSizeF() * 1.15);
  p.setFont(f);
  p.drawText(axisRect()->rect().adjusted(12, 12, -12, -12), Qt::AlignCenter | Qt::TextWordWrap, placeholder_);
}

void Chart::resizeEvent(QResizeEvent* event) {
  QCustomPlot::resizeEvent(event);
  layOutLegend();  // its entries wrap to the new width
}

}  // namespace mosaic::ui
