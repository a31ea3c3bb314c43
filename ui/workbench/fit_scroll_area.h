#pragma once
// A scroll area that gives its panel the viewport's size whenever the panel's minimum fits in it, and
// scrolls only below that minimum. QScrollArea's resizable mode sizes a panel holding a wrapping
// label (any layout with height-for-width) from its items' size hints instead of their minimums, so
// a dock scrolled where its panel could have fitted, and the panel's chart or grid lay half under
// the fold while a table above kept its full preferred height.
#include <QScrollArea>

namespace mosaic::ui {

class FitScrollArea : public QScrollArea {
  Q_OBJECT
 public:
  explicit FitScrollArea(QWidget* content, QWidget* parent = nullptr);

  // The least height the content needs at this width (its wrapping rows wrapped at that width).
  int minimumContentHeight(int width) const;

 protected:
  void resizeEvent(QResizeEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void fit();
  bool fitting_ = false;
};

}  // namespace mosaic::ui
