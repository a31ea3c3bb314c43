#pragma once
// A row of controls that wraps: items laid out left to right, each onto the next line when the
// line is full, so that a narrow dock (1366×768 puts three side by side) shows every control
// instead of clipping the last ones or hiding them behind a horizontal scroll bar. Its height
// follows its width (heightForWidth), so the layouts around it make room for the lines it needs.
#include <QLayout>
#include <QList>

#include <initializer_list>

namespace mosaic::ui {

class FlowLayout : public QLayout {
 public:
  explicit FlowLayout(QWidget* parent = nullptr, int spacing = -1);
  ~FlowLayout() override;

  // Controls that belong together (a label and its field) wrap as one: put them in a widget of
  // their own with group().
  static QWidget* group(std::initializer_list<QWidget*> widgets);

  void addItem(QLayoutItem* item) override;
  int count() const override { return static_cast<int>(items_.size()); }
  QLayoutItem* itemAt(int index) const override { return items_.value(index); }
  QLayoutItem* takeAt(int index) override;
  Qt::Orientations expandingDirections() const override { return {}; }
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override { return arrange(QRect(0, 0, width, 0), false); }
  QSize minimumSize() const override;
  QSize sizeHint() const override;
  void setGeometry(const QRect& rect) override;

 private:
  int gap() const;
  // Places the items in `rect` (or only measures, `apply` false); returns the height they take.
  int arrange(const QRect& rect, bool apply) const;
  QList<QLayoutItem*> items_;
  int spacing_value_;
};

}  // namespace mosaic::ui
