#pragma once
// The family: its variants in a table (architecture, parameters, bytes, dtypes, ESFT adapters),
// buttons to open a family, add variant folders (several at once) and remove the selected ones,
// folders dropped from a file manager added, a progress bar with cancel while the engine loads and
// hashes, the engine's error, in place, when a folder is refused, and the device the family is
// served on (the CPU reference, or the GPU where one can be used), and the host budget: how much of
// the family's distinct weights stays in RAM, the rest read from disk as needed.
#include <QAbstractTableModel>
#include <QWidget>

#include "workbench/engine_types.h"

class QDragEnterEvent;
class QDropEvent;
class QComboBox;
namespace mosaic::ui {
class ByteSizeBox;
}
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
  QStringList variantDirs() const;  // the open family's variant folders, in order
  QTableView* table() const { return table_; }
  QProgressBar* progressBar() const { return progress_; }  // shown only while a family opens
  QComboBox* deviceBox() const { return device_; }
  QString device() const;  // "cpu" or "cuda": what the engine serves on now
  QComboBox* cpuWeightsBox() const { return cpu_weights_; }
  QString cpuWeights() const;  // "stored", "fp32" or "mapped": how the CPU backend holds weights now
  ByteSizeBox* hostBudgetBox() const { return host_budget_; }
  qint64 hostBudget() const;  // bytes; 0: every weight in RAM
  void setHostBudget(qint64 bytes);  // shown only: no signal
  // Each asks to reopen the family with its variant folders changed; the open family stays until
  // the new one has opened.
  void addFolders(const QStringList& dirs);
  void removeSelected();

 public Q_SLOTS:
  void showProgress(const QString& stage, int done, int total);
  void showFamily(const mosaic::ui::FamilyInfo& family);
  void showError(const QString& what, const QString& message);
  // Which devices can serve: the GPU's description, or empty and why there is none.
  void showDevices(const QString& cudaDescription, const QString& cudaUnavailable);
  void showDevice(const QString& device);  // what the engine serves on now ("cpu" or "cuda")
  void showCpuWeights(const QString& weights);  // how the CPU backend holds weights now

 Q_SIGNALS:
  void openRequested(const QStringList& dirs);
  void deviceRequested(const QString& device);
  void cpuWeightsRequested(const QString& weights);
  // The host budget was changed (bytes; 0: all): the family opens again under it.
  void hostBudgetRequested(qint64 bytes);
  void cancelRequested();

 private:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;
  void chooseFolders();
  FamilyModel* model_;
  QTableView* table_;
  QProgressBar* progress_;
  QPushButton* cancel_;
  QPushButton* remove_;
  QComboBox* device_;
  QComboBox* cpu_weights_;
  ByteSizeBox* host_budget_;
  qint64 host_budget_shown_ = 0;  // what the open family was opened with
  QLabel* status_;
  QLabel* error_;
};

QString formatBytes(qint64 bytes);

}  // namespace mosaic::ui
