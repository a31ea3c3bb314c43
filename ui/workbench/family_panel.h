#pragma once
// The family: its variants in a table (architecture, parameters, bytes, dtypes, ESFT adapters),
// buttons to open folders, a progress bar with cancel while the engine loads and hashes, and the
// engine's error, in place, when a folder is refused.
#include <QAbstractTableModel>
#include <QWidget>

#include "workbench/engine_types.h"

class QLabel;
class QProgressBar;
class QPushButton;
class QTableView;

namespace mosaic::ui {

class FamilyModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  using QAbstractTableModel::QAbstractTableModel;
  void setFamily(const FamilyInfo& family);
  const FamilyInfo& family() const { return family_; }
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

 private:
  FamilyInfo family_;
};

class FamilyPanel : public QWidget {
  Q_OBJECT
 public:
  explicit FamilyPanel(QWidget* parent = nullptr);
  FamilyModel* model() const { return model_; }
  QString errorText() const;

 public Q_SLOTS:
  void showProgress(const QString& stage, int done, int total);
  void showFamily(const mosaic::ui::FamilyInfo& family);
  void showError(const QString& what, const QString& message);

 Q_SIGNALS:
  void openRequested(const QStringList& dirs);
  void cancelRequested();

 private:
  void chooseFolders();
  FamilyModel* model_;
  QTableView* table_;
  QProgressBar* progress_;
  QPushButton* cancel_;
  QLabel* status_;
  QLabel* error_;
};

QString formatBytes(qint64 bytes);

}  // namespace mosaic::ui
