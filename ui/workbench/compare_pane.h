#pragma once
// Side by side: one prompt to two variants at once — say a fine-tune through its own weights
// alone, and the same variant as the consolidated layout serves it — streamed in two columns, the
// first token where they diverge marked in both, and where that is said under them.
#include <QVector>
#include <QWidget>

#include "workbench/engine_types.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTextEdit;

namespace mosaic::ui {

class ComparePane : public QWidget {
  Q_OBJECT
 public:
  explicit ComparePane(QWidget* parent = nullptr);
  QComboBox* targetBox(int side) const { return side == 0 ? left_ : right_; }
  QCheckBox* ownBox(int side) const { return side == 0 ? left_own_ : right_own_; }
  QLineEdit* promptEdit() const { return prompt_; }
  QString text(int side) const;
  // The index of the first generated token where the sides differ; −1 while they agree.
  int divergence() const;
  QString statusText() const;
  QString summaryText(int side) const;
  void send();

 public Q_SLOTS:
  void setVariants(const mosaic::ui::FamilyInfo& family);
  void appendToken(int side, qint64 token, const QString& text);
  void finish(int side, const QString& rest, const QString& summary);
  void showError(int side, const QString& message);

 Q_SIGNALS:
  void compareRequested(const QString& left, bool leftOwn, const QString& right, bool rightOwn, const QString& prompt,
                        int maxNewTokens, double temperature, double topP);
  void stopRequested();

 private:
  void render(int side);
  void updateStatus();
  QComboBox *left_, *right_;
  QCheckBox *left_own_, *right_own_;
  QLineEdit* prompt_;
  QPushButton *send_, *stop_;
  QTextEdit* column_[2];
  QLabel* summary_[2];
  QLabel* status_;
  QVector<qint64> ids_[2];
  QStringList pieces_[2];
  int running_ = 0;
};

}  // namespace mosaic::ui
