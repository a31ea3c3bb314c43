#pragma once
// A chart as every workbench chart behaves: its legend in a row under the axes (never over the
// data); a click on a legend entry hides or shows that series; hovering a point reads it out; a
// right click offers a log scale for the values, fitting the view again, and export as PNG, SVG or
// PDF (titled). Drag to pan and wheel to zoom, as QCustomPlot does.
#include "report/qcustomplot_include.h"

#include <QPointer>

namespace mosaic::ui {

class Chart : public QCustomPlot {
  Q_OBJECT
 public:
  Chart(const QString& title, const QString& xLabel, const QString& yLabel, QWidget* parent = nullptr);
  ~Chart() override;
  // Plottables whose property kGroup is equal are shown and hidden together from the legend.
  static constexpr const char* kGroup = "mosaicGroup";

  QString title() const { return title_; }
  void setTitle(const QString& title) { title_ = title; }  // what an export is titled
  // Values on a log scale (latencies spanning orders of magnitude); zeros are then left out.
  void setLogScale(bool on);
  bool logScale() const;
  // Hides or shows the series at `index` among the plottables, and greys its legend entry.
  void setSeriesVisible(int index, bool visible);
  // What hovering `pos` shows: the nearest visible point's series, x and y; empty when none is near.
  QString readout(const QPoint& pos);
  // Writes the chart, titled, in the format the extension names; empty on success, else why not.
  QString exportTo(const QString& file);
  // Fits the axes to the visible series and lays the legend out again; call after adding data.
  void fit();
  // The legend in its row under the axes while any series has an entry, out of the layout while
  // none has (so an empty chart's axes take its whole width); call after adding or clearing series.
  void layOutLegend();
  // What the plot area says while no series holds a point ("no data yet — press Start"): an empty
  // chart reads as waiting, not broken.
  void setPlaceholder(const QString& text);
  QString placeholder() const { return placeholder_; }
  bool hasData() const;
  // A dashed vertical line at x named along it (a run's start on a sweep's time axis); the name
  // shows only while the plot is tall enough to hold it, the line always.
  void addMarker(double x, const QString& name, const QColor& color);
  // The marker names shown now (for tests).
  int visibleMarkerNames() const;

 Q_SIGNALS:
  void exported(const QString& message);  // "Wrote …" or why not, for a status line

 protected:
  void mouseMoveEvent(QMouseEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void paintEvent(QPaintEvent* event) override;

 private:
  QString title_;
  QString placeholder_;
  QSharedPointer<QCPAxisTicker> linear_ticker_;
  QList<QPointer<QCPItemText>> marker_names_;  // QCustomPlot owns them: clearItems() deletes them
};

}  // namespace mosaic::ui
