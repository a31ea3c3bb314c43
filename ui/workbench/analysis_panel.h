#pragma once
// Expert distances as heatmaps: the position distance d(l, e) over the family, one pair's
// distances per position, or a pair's cross-position matrix (the paper's Figure 2) — with a colour
// scale, hover tooltips, zoom and drag, and PNG/SVG export.
#include <QWidget>

#include "workbench/engine_types.h"

class QComboBox;
class QCPColorMap;
class QCPColorScale;
class QCustomPlot;
class QLabel;
class QSpinBox;

namespace mosaic::ui {

class AnalysisPanel : public QWidget {
  Q_OBJECT
 public:
  explicit AnalysisPanel(QWidget* parent = nullptr);
  QCustomPlot* plot() const { return plot_; }
  const Heatmap& heatmap() const { return heatmap_; }
  // Writes the plot, titled, as PNG, SVG or PDF by the file's extension and says so in the status
  // line; false (and the reason in the status line) when the extension is none of those or the
  // file could not be written.
  bool exportTo(const QString& file);
  QString statusText() const;
  // The tooltip text for a cell (row, column) of the current heatmap.
  QString describeCell(int row, int column) const;
  void choose(Heatmap::Kind kind, int a, int b, int layer);

 public Q_SLOTS:
  void setVariants(const mosaic::ui::FamilyInfo& family);
  void showHeatmap(const mosaic::ui::Heatmap& heatmap);
  void showError(const QString& message);

 Q_SIGNALS:
  void heatmapRequested(mosaic::ui::Heatmap::Kind kind, int a, int b, int layer);

 private:
  void request();
  void exportDialog();
  QComboBox* kind_;
  QComboBox* a_;
  QComboBox* b_;
  QSpinBox* layer_;
  QLabel* status_;
  QCustomPlot* plot_;
  QCPColorMap* map_;
  QCPColorScale* scale_;
  Heatmap heatmap_;
  bool updating_ = false;
};

}  // namespace mosaic::ui
