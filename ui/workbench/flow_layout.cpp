#include "workbench/flow_layout.h"

#include <QHBoxLayout>
#include <QStyle>
#include <QWidget>

#include <algorithm>

namespace mosaic::ui {

FlowLayout::FlowLayout(QWidget* parent, int spacing) : QLayout(parent), spacing_value_(spacing) {
  setContentsMargins(0, 0, 0, 0);
}

FlowLayout::~FlowLayout() {
  while (QLayoutItem* item = takeAt(0)) delete item;
}

QWidget* FlowLayout::group(std::initializer_list<QWidget*> widgets) {
  auto* box = new QWidget;
  auto* row = new QHBoxLayout(box);
  row->setContentsMargins(0, 0, 0, 0);
  for (QWidget* w : widgets) row->addWidget(w);
  return box;
}

void FlowLayout::addItem(QLayoutItem* item) { items_.append(item); }

QLayoutItem* FlowLayout::takeAt(int index) { return index >= 0 && index < items_.size() ? items_.takeAt(index) : nullptr; }

int FlowLayout::gap() const {
  if (spacing_value_ >= 0) return spacing_value_;
  const QWidget* w = parentWidget();
  return w ? w->style()->pixelMetric(QStyle::PM_LayoutHorizontalSpacing, nullptr, w) : 6;
}

QSize FlowLayout::minimumSize() const {
  // As narrow as its widest item: everything else wraps.
  QSize size;
  for (const QLayoutItem* item : items_) size = size.expandedTo(item->minimumSize());
  const QMargins m = contentsMargins();
  return size + QSize(m.left() + m.right(), m.top() + m.bottom());
}

QSize FlowLayout::sizeHint() const {
  // One line, when there is room for it.
  int width = 0, height = 0;
  for (const QLayoutItem* item : items_) {
    if (item->isEmpty()) continue;
    width += item->sizeHint().width() + (width > 0 ? gap() : 0);
    height = std::max(height, item->sizeHint().height());
  }
  const QMargins m = contentsMargins();
  return {width + m.left() + m.right(), height + m.top() + m.bottom()};
}

void FlowLayout::setGeometry(const QRect& rect) {
  QLayout::setGeometry(rect);
  arrange(rect, true);
}

int FlowLayout::arrange(const QRect& rect, bool apply) const {
  const QMargins m = contentsMargins();
  const QRect area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom());
  const int spacing = gap();
  int x = area.x(), y = area.y(), line = 0;
  for (QLayoutItem* item : items_) {
    if (item->isEmpty()) continue;  // hidden widgets take no room
    const QSize hint = item->sizeHint();
    const int width = std::min(hint.width(), std::max(area.width(), item->minimumSize().width()));
    if (x > area.x() && x + width > area.right() + 1) {  // full: the next line
      x = area.x();
      y += line + spacing;
      line = 0;
    }
    if (apply) item->setGeometry(QRect(QPoint(x, y), QSize(width, hint.height())));
    x += width + spacing;
    line = std::max(line, hint.height());
  }
  return y + line - rect.y() + m.bottom();
}

}  // namespace mosaic::ui
