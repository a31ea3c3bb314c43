#include "workbench/fit_scroll_area.h"

#include <QEvent>
#include <QLayout>
#include <QScrollBar>

#include <algorithm>

namespace mosaic::ui {

FitScrollArea::FitScrollArea(QWidget* content, QWidget* parent) : QScrollArea(parent) {
  setWidgetResizable(false);  // fit() sizes the content
  setWidget(content);
  content->installEventFilter(this);
}

int FitScrollArea::minimumContentHeight(int width) const {
  const QWidget* w = widget();
  if (!w) return 0;
  const QLayout* layout = w->layout();
  if (!layout) return std::max(w->minimumSizeHint().height(), w->minimumHeight());
  const int fromLayout = layout->hasHeightForWidth() ? layout->totalMinimumHeightForWidth(width) : layout->totalMinimumSize().height();
  return std::max(fromLayout, w->minimumHeight());
}

void FitScrollArea::fit() {
  QWidget* w = widget();
  if (!w || fitting_) return;
  fitting_ = true;  // resizing the content can post another layout request
  const QSize room = contentsRect().size();  // the viewport without scroll bars
  const int minWidth = std::max(w->layout() ? w->layout()->totalMinimumSize().width() : w->minimumSizeHint().width(), w->minimumWidth());
  int width = std::max(room.width(), minWidth);
  int height = room.height();
  if (width > room.width()) height -= horizontalScrollBar()->sizeHint().height();
  if (minimumContentHeight(width) > height) {  // it scrolls vertically: the bar takes its width
    width = std::max(room.width() - verticalScrollBar()->sizeHint().width(), minWidth);
    if (width > room.width() - verticalScrollBar()->sizeHint().width()) height = room.height() - horizontalScrollBar()->sizeHint().height();
  }
  w->resize(width, std::max(height, minimumContentHeight(width)));
  fitting_ = false;
}

void FitScrollArea::resizeEvent(QResizeEvent* event) {
  QScrollArea::resizeEvent(event);
  fit();
}

bool FitScrollArea::eventFilter(QObject* watched, QEvent* event) {
  const bool handled = QScrollArea::eventFilter(watched, event);
  if (watched == widget() && (event->type() == QEvent::LayoutRequest || event->type() == QEvent::Show)) fit();
  return handled;
}

}  // namespace mosaic::ui
