#include "workbench/layout_grid.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include <cmath>

namespace mosaic::ui {

namespace {
constexpr int kMargin = 36;  // room for the axis labels
constexpr int kMinRow = 9;   // pixels per layer at least
constexpr int kLabelRow = 14;  // pixels a layer label needs: smaller rows label every few layers
}

QColor variantColor(int variant) {
  static const QColor palette[] = {QColor(0x1f77b4), QColor(0xff7f0e), QColor(0x2ca02c), QColor(0xd62728), QColor(0x9467bd),
                                   QColor(0x8c564b), QColor(0xe377c2), QColor(0x7f7f7f), QColor(0xbcbd22), QColor(0x17becf)};
  return palette[static_cast<std::size_t>(variant) % std::size(palette)];
}

LayoutGrid::LayoutGrid(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setMinimumSize(200, 120);
}

void LayoutGrid::setLayoutInfo(const LayoutInfo& layout) {
  layout_ = layout;
  // Rows stay tall enough to see and point at (Mixtral has 32 layers); the panel scrolls beyond.
  setMinimumHeight(std::max(120, kMargin + kMinRow * layout_.layers));
  update();
}

void LayoutGrid::setStale(const QString& note) {
  stale_ = note;
  update();
}

int LayoutGrid::residentCells() const {
  int n = 0;
  for (int v : layout_.resident) n += v >= 0;
  return n;
}

QSize LayoutGrid::sizeHint() const { return {kMargin + 28 * std::max(layout_.experts, 8), kMargin + 22 * std::max(layout_.layers, 4)}; }

QRect LayoutGrid::cellRect(int layer, int expert) const {
  const int w = (width() - kMargin) / std::max(layout_.experts, 1), h = (height() - kMargin) / std::max(layout_.layers, 1);
  return {kMargin + expert * w, kMargin / 2 + layer * h, w - 1, h - 1};
}

void LayoutGrid::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (layout_.layers == 0) {
    p.drawText(rect().adjusted(8, 8, -8, -8), Qt::AlignCenter | Qt::TextWordWrap, stale_.isEmpty() ? tr("No layout yet") : stale_);
    return;
  }
  p.setPen(palette().text().color());
  for (int l = 0; l < layout_.layers; ++l) {
    const QRect r = cellRect(l, 0);
    const int every = (kLabelRow + r.height()) / (r.height() + 1);
    if (l % every == 0)
      p.drawText(QRect(0, r.center().y() - kLabelRow / 2, kMargin - 4, kLabelRow), Qt::AlignRight | Qt::AlignVCenter, QString::number(l));
    for (int e = 0; e < layout_.experts; ++e) {
      const QRect c = cellRect(l, e);
      const int v = layout_.resident.value(l * layout_.experts + e, -1);
      const double d = layout_.distance.value(l * layout_.experts + e, NAN);
      if (std::isnan(d)) {
        p.fillRect(c, palette().window());  // dense layer: no experts
      } else if (v >= 0) {
        p.fillRect(c, variantColor(v));
        // Hybrid: the folders' deltas resident beside the base's copy, marked Δ (with their count).
        if (const int n = layout_.deltas.value(l * layout_.experts + e, 0); n > 0) {
          p.setPen(QPen(Qt::white, 2));
          p.drawRect(c.adjusted(2, 2, -2, -2));
          p.drawText(c, Qt::AlignCenter, n == 1 ? QStringLiteral("Δ") : QStringLiteral("Δ%1").arg(n));
          p.setPen(palette().text().color());
        }
      } else {
        p.fillRect(c, QColor(0xdddddd));
        p.fillRect(c, QBrush(QColor(0x999999), Qt::BDiagPattern));
      }
    }
  }
  for (int e = 0; e < layout_.experts; ++e) {
    const QRect r = cellRect(layout_.layers - 1, e);
    p.drawText(QRect(r.left(), r.bottom() + 2, r.width(), kMargin / 2), Qt::AlignHCenter | Qt::AlignTop, QString::number(e));
  }
  if (!stale_.isEmpty()) {  // washed out, the note across it
    p.fillRect(rect(), QColor(255, 255, 255, 170));
    p.setPen(QColor(0xb00020));
    p.drawText(rect().adjusted(8, 8, -8, -8), Qt::AlignCenter | Qt::TextWordWrap, stale_);
  }
}

bool LayoutGrid::event(QEvent* e) {
  if (e->type() != QEvent::ToolTip) return QWidget::event(e);
  const QPoint pos = static_cast<QHelpEvent*>(e)->pos();
  for (int l = 0; l < layout_.layers; ++l)
    for (int x = 0; x < layout_.experts; ++x)
      if (cellRect(l, x).contains(pos)) {
        const int v = layout_.resident.value(l * layout_.experts + x, -1);
        const double d = layout_.distance.value(l * layout_.experts + x, NAN);
        const bool swapping = !layout_.virtual_counts.isEmpty();  // virtual experts: the set moves with the traffic
        QString what = v >= 0 ? (swapping ? tr("resident at first: %1's copy (updates swap the least important out)").arg(layout_.variants.value(v))
                                          : tr("resident: %1's copy").arg(layout_.variants.value(v)))
                              : (swapping ? tr("not resident: the router skips it until an update swaps it in") : tr("not resident: loaded on a miss"));
        if (!layout_.deltas.isEmpty() && v >= 0) {
          const int n = layout_.deltas.value(l * layout_.experts + x, 0);
          what += n > 0 ? tr("\n%n delta folder(s)' deltas resident beside it", nullptr, n) : tr("\nshared: every delta folder's rows take it");
        }
        QToolTip::showText(static_cast<QHelpEvent*>(e)->globalPos(),
                           tr("layer %1, expert %2\n%3\nd(l, e) = %4")
                               .arg(l)
                               .arg(x)
                               .arg(what)
                               .arg(std::isnan(d)                        ? tr("dense layer")
                                    : !layout_.config_family.isEmpty() ? tr("unknown (planned from config.json)")
                                                                        : QString::number(d, 'g', 4)),
                           this);
        return true;
      }
  QToolTip::hideText();
  e->ignore();
  return true;
}

}  // namespace mosaic::ui
