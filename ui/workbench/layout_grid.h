#pragma once
// Layers × experts, each cell coloured by the variant whose copy is resident, hatched grey where
// none is (those experts are misses, loaded on demand); in a hybrid layout, cells whose delta
// folders' deltas are resident beside the base's copy are framed and marked Δ. Hover for layer,
// expert, variant, deltas, d(l, e).
#include <QColor>
#include <QWidget>

#include "workbench/engine_types.h"

namespace mosaic::ui {

QColor variantColor(int variant);

class LayoutGrid : public QWidget {
  Q_OBJECT
 public:
  explicit LayoutGrid(QWidget* parent = nullptr);
  void setLayoutInfo(const LayoutInfo& layout);
  const LayoutInfo& layoutInfo() const { return layout_; }
  int residentCells() const;
  // A note drawn over the grid when what it shows is not what serves (a failed re-plan); empty: none.
  void setStale(const QString& note);
  QString staleNote() const { return stale_; }
  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent*) override;
  bool event(QEvent* e) override;  // tooltips

 private:
  QRect cellRect(int layer, int expert) const;
  LayoutInfo layout_;
  QString stale_;
};

}  // namespace mosaic::ui
