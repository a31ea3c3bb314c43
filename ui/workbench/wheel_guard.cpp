#include "workbench/wheel_guard.h"

#include <QAbstractScrollArea>
#include <QAbstractSpinBox>
#include <QApplication>
#include <QComboBox>
#include <QEvent>
#include <QObject>
#include <QScrollBar>
#include <QWheelEvent>

namespace mosaic::ui {
namespace {

class WheelGuard final : public QObject {
 public:
  using QObject::QObject;

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (event->type() != QEvent::Wheel) return false;
    auto* w = qobject_cast<QWidget*>(watched);
    if (!w || w->hasFocus()) return false;
    // Not focused: the nearest scrolling ancestor scrolls instead (a filter that takes the event
    // stops it from reaching the parents on its own).
    for (QWidget* p = w->parentWidget(); p; p = p->parentWidget())
      if (auto* area = qobject_cast<QAbstractScrollArea*>(p)) {
        QApplication::sendEvent(area->verticalScrollBar(), event);
        break;
      }
    return true;
  }
};

}  // namespace

void guard_wheel(QWidget* root) {
  auto* guard = new WheelGuard(root);
  for (QWidget* w : root->findChildren<QWidget*>()) {
    if (!qobject_cast<QAbstractSpinBox*>(w) && !qobject_cast<QComboBox*>(w)) continue;
    w->setFocusPolicy(Qt::StrongFocus);
    w->installEventFilter(guard);
  }
}

}  // namespace mosaic::ui
