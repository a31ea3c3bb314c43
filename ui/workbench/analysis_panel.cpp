#include "workbench/analysis_panel.h"
#include "workbench/file_dialogs.h"
#include "workbench/flow_layout.h"

#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QToolTip>
#include <QVBoxLayout>

#include <cmath>

#include "report/plot_export.h"
#include "report/qcustomplot_include.h"

namespace mosaic::ui {

AnalysisPanel::AnalysisPanel(QWidget* parent) : QWidget(parent) {
  kind_ = new QComboBox;
  kind_->addItem(tr("Position distance d(l, e)"), static_cast<int>(Heatmap::Kind::Position));
  kind_->addItem(tr("One pair, per position"), static_cast<int>(Heatmap::Kind::Pair));
  kind_->addItem(tr("One pair, cross-position (Figure 2)"), static_cast<int>(Heatmap::Kind::Cross));
  a_ = new QComboBox;
  b_ = new QComboBox;
  layer_ = new QSpinBox;
  layer_->setRange(-1, 0);
  layer_->setSpecialValueText(tr("all layers"));
  layer_->setPrefix(tr("layer "));
  auto* png = new QPushButton(tr("Export…"));
  status_ = new QLabel;
  status_->setWordWrap(true);

  plot_ = new QCustomPlot;
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot_->setMinimumSize(320, 240);
  plot_->yAxis->setRangeReversed(true);  // layer 0 on top, as in the layout grid
  map_ = new QCPColorMap(plot_->xAxis, plot_->yAxis);
  scale_ = new QCPColorScale(plot_);
  plot_->plotLayout()->addElement(0, 1, scale_);
  map_->setColorScale(scale_);
  QCPColorGradient gradient(QCPColorGradient::gpThermal);
  gradient.setNanHandling(QCPColorGradient::nhTransparent);  // dense layers: no experts
  map_->setGradient(gradient);
  map_->setInterpolate(false);
  auto* margins = new QCPMarginGroup(plot_);
  plot_->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  scale_->setMarginGroup(QCP::msBottom | QCP::msTop, margins);

  auto* controls = new FlowLayout;  // wraps in a narrow dock, so the plot and its colour scale fit
  controls->addWidget(kind_);
  controls->addWidget(a_);
  controls->addWidget(b_);
  controls->addWidget(layer_);
  controls->addWidget(png);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(controls);
  layout->addWidget(plot_, 1);
  layout->addWidget(status_);

  for (QComboBox* c : {kind_, a_, b_}) connect(c, &QComboBox::currentIndexChanged, this, [this] { request(); });
  connect(layer_, &QSpinBox::valueChanged, this, [this] { request(); });
  connect(png, &QPushButton::clicked, this, &AnalysisPanel::exportDialog);
  connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
    int column = 0, row = 0;
    map_->data()->coordToCell(plot_->xAxis->pixelToCoord(e->position().x()), plot_->yAxis->pixelToCoord(e->position().y()), &column, &row);
    const QString text = describeCell(row, column);
    if (text.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(e->globalPosition().toPoint(), text, plot_);
  });
}

void AnalysisPanel::setVariants(const FamilyInfo& family) {
  updating_ = true;
  a_->clear();
  b_->clear();
  for (const VariantInfo& v : family.variants) {
    a_->addItem(v.name);
    b_->addItem(v.name);
  }
  if (b_->count() > 1) b_->setCurrentIndex(1);
  layer_->setRange(-1, std::max(0, family.layers - 1));
  updating_ = false;
  request();
}

void AnalysisPanel::choose(Heatmap::Kind kind, int a, int b, int layer) {
  updating_ = true;
  kind_->setCurrentIndex(kind_->findData(static_cast<int>(kind)));
  a_->setCurrentIndex(a);
  b_->setCurrentIndex(b);
  layer_->setValue(layer);
  updating_ = false;
  request();
}

void AnalysisPanel::request() {
  if (updating_ || a_->count() == 0) return;
  const auto kind = static_cast<Heatmap::Kind>(kind_->currentData().toInt());
  a_->setEnabled(kind != Heatmap::Kind::Position);
  b_->setEnabled(kind != Heatmap::Kind::Position);
  layer_->setEnabled(kind == Heatmap::Kind::Cross);
  status_->setText(tr("Computing…"));
  Q_EMIT heatmapRequested(kind, a_->currentIndex(), b_->currentIndex(), layer_->value());
}

void AnalysisPanel::showHeatmap(const Heatmap& h) {
  heatmap_ = h;
  map_->data()->setSize(h.columns, h.rows);
  map_->data()->setRange(QCPRange(0, std::max(0, h.columns - 1)), QCPRange(0, std::max(0, h.rows - 1)));
  double lo = INFINITY, hi = -INFINITY;
  for (int r = 0; r < h.rows; ++r)
    for (int c = 0; c < h.columns; ++c) {
      const double v = h.values.value(r * h.columns + c, NAN);
      map_->data()->setCell(c, r, v);
      if (!std::isnan(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
  if (lo <= hi) map_->setDataRange(QCPRange(lo, hi > lo ? hi : lo + 1e-12));
  plot_->xAxis->setLabel(h.column_label);
  plot_->yAxis->setLabel(h.row_label);
  scale_->axis()->setLabel(tr("L2 distance"));
  plot_->xAxis->setRange(-0.5, h.columns - 0.5);
  plot_->yAxis->setRange(-0.5, h.rows - 0.5);
  plot_->replot();
  status_->setStyleSheet(QString());
  status_->setText(h.title + tr(" — min %1, max %2; scroll to zoom, drag to pan").arg(lo, 0, 'g', 4).arg(hi, 0, 'g', 4));
}

QString AnalysisPanel::describeCell(int row, int column) const {
  const Heatmap& h = heatmap_;
  if (row < 0 || column < 0 || row >= h.rows || column >= h.columns) return {};
  const double v = h.values.value(row * h.columns + column, NAN);
  const QString value = std::isnan(v) ? tr("dense layer") : QString::number(v, 'g', 5);
  if (h.kind == Heatmap::Kind::Cross) {
    const auto ra = h.positions.value(row), cb = h.positions.value(column);
    return tr("%1: layer %2, expert %3\n%4: layer %5, expert %6\nL2 distance %7 (‖A − B‖₂ of gate, up and down weights together)")
        .arg(h.row_label).arg(ra.first).arg(ra.second).arg(h.column_label).arg(cb.first).arg(cb.second).arg(value);
  }
  if (std::isnan(v)) return tr("layer %1, expert %2\n%3").arg(row).arg(column).arg(value);
  // The measure and its unit: an L2 norm of weight differences, in the weights' own units.
  return h.kind == Heatmap::Kind::Pair
             ? tr("layer %1, expert %2\nL2 distance %3 between the two variants' copies (‖A − B‖₂ of gate, up and down weights together)")
                   .arg(row).arg(column).arg(value)
             : tr("layer %1, expert %2\nposition distance d = %3: the sum over every pair of variants of ‖A − B‖₂ of this expert's "
                  "gate, up and down weights")
                   .arg(row).arg(column).arg(value);
}

bool AnalysisPanel::exportTo(const QString& file) {
  const QString error = exportPlot(*plot_, file, heatmap_.title);
  if (!error.isEmpty()) {
    showError(tr("Export: %1").arg(error));
    return false;
  }
  status_->setStyleSheet(QString());
  status_->setText(tr("Wrote %1").arg(file));
  return true;
}

QString AnalysisPanel::statusText() const { return status_->text(); }

void AnalysisPanel::exportDialog() {
  const QString file = remembered(QFileDialog::getSaveFileName(this, tr("Export heatmap"), inStartFolder(QStringLiteral("distances.png")),
                                                               tr("PNG (*.png);;SVG (*.svg);;PDF (*.pdf)")));
  if (!file.isEmpty()) exportTo(file);
}

void AnalysisPanel::showError(const QString& message) {
  status_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
  status_->setText(message);
}

}  // namespace mosaic::ui
