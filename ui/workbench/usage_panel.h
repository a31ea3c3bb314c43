#pragma once
// Expert usage: paste a text, and see per layer how often each variant's router chose each expert
// over it — bars per expert, one colour per variant (click a variant in the legend to hide it). The
// evidence behind a budget: experts rarely chosen are the cheap ones to leave out.
#include <QWidget>

#include "workbench/engine_types.h"

class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

namespace mosaic::ui {

class Chart;

class UsagePanel : public QWidget {
  Q_OBJECT
 public:
  explicit UsagePanel(QWidget* parent = nullptr);
  QPlainTextEdit* textEdit() const { return text_; }
  QSpinBox* layerBox() const { return layer_; }
  Chart* chart() const { return chart_; }
  const ExpertUsage& usage() const { return usage_; }
  QString statusText() const;
  void count();  // asks for the usage of the text

 public Q_SLOTS:
  void showUsage(const mosaic::ui::ExpertUsage& usage);
  // Forgets the counts (they were of another layout or family), saying why.
  void clear(const QString& why);
  void showError(const QString& message);

 Q_SIGNALS:
  void usageRequested(const QString& text);

 private:
  void draw();
  QPlainTextEdit* text_;
  QSpinBox* layer_;
  QPushButton* count_;
  QLabel* status_;
  Chart* chart_;
  ExpertUsage usage_;
};

}  // namespace mosaic::ui
