#pragma once
// The consolidated layout under a budget: the resident-copy grid with its legend, a budget control
// whose every change re-plans the layout on the engine thread, the capacity it buys and the
// itemized reserve, and the policy.
#include <QWidget>

#include "workbench/engine_types.h"

class QComboBox;
class QLineEdit;
class QSpinBox;
class QLabel;
class QTableWidget;
class QTimer;

namespace mosaic::ui {

class ByteSizeBox;

class LayoutGrid;

class LayoutPanel : public QWidget {
  Q_OBJECT
 public:
  explicit LayoutPanel(QWidget* parent = nullptr);
  LayoutGrid* grid() const { return grid_; }
  ByteSizeBox* budgetBox() const { return budget_; }
  QString budgetNote() const;  // why the budget did not plan ("" when it did)
  qint64 budgetBytes() const;
  QString summaryText() const;
  QString policy() const;
  QComboBox* policyBox() const { return policy_; }
  ReserveSettings reserve() const;
  // The weighted policy's traffic share per variant, in the layout's variant order (shown, and
  // editable, only while the policy is weighted).
  QVector<double> shares() const;
  // What a family being opened will be planned with, shown at once without planning. A re-plan
  // still pending from an edit is dropped: fired later, it would overrule the opened plan with
  // the boxes' old values.
  void presetPlan(const QString& policy, const ReserveSettings& reserve, const QVector<double>& shares);
  QTableWidget* sharesTable() const { return shares_; }
  QSpinBox* contextBox() const { return context_; }
  QSpinBox* requestsBox() const { return requests_; }
  QSpinBox* prefillBox() const { return prefill_; }
  QSpinBox* missSlotsBox() const { return miss_slots_; }
  // Virtual experts' calibration text (a file), shown while the policy is virtual.
  QLineEdit* calibrationBox() const { return calibration_; }
  // Offers the hybrid policy, or greys it out (a family without delta folders over one base).
  void setHybridEnabled(bool on);
  // The folder whose config.json files the panel plans from (what-if mode); empty: the open family.
  QString configFamily() const { return config_family_; }

 public Q_SLOTS:
  void showLayout(const mosaic::ui::LayoutInfo& layout);
  void showError(const QString& what, const QString& message);
  // What-if planning for a family too large to open: plans from the config.json files in `dir`
  // (variant folders) at the panel's budget; every edit re-plans it until leaveConfigFamily().
  void openConfigFamily(const QString& dir);
  void leaveConfigFamily();

 Q_SIGNALS:
  void planRequested(qint64 budgetBytes, const QString& policy, const mosaic::ui::ReserveSettings& reserve,
                     const QVector<double>& shares);
  // Policy "virtual": SwapMoE's counts planned on the calibration file (empty: uniform counts).
  void planVirtualRequested(qint64 budgetBytes, const mosaic::ui::ReserveSettings& reserve, const QString& calibration);
  void configPlanRequested(const QString& dir, qint64 budgetBytes, const QString& policy, const mosaic::ui::ReserveSettings& reserve,
                           const QVector<double>& shares);
  // Back from what-if planning: the open family's layout is wanted again.
  void configFamilyLeft();
  void importRequested(const QString& file);
  void exportRequested(const QString& file);

 private:
  LayoutGrid* grid_;
  ByteSizeBox* budget_;
  QLabel* budget_note_;
  QComboBox* policy_;
  QSpinBox *context_, *requests_, *prefill_, *miss_slots_;  // the reserve
  QTableWidget* shares_;
  QWidget* calibration_row_;
  QLineEdit* calibration_;
  QLabel* summary_;
  QLabel* legend_;
  QTimer* debounce_;
  QString config_family_;
  qint64 family_budget_ = 0;  // the open family's last planned budget, restored when the what-if ends
  QWidget* config_bar_;  // what-if mode: which folder, and the way back
  QLabel* config_label_;
  QWidget* files_;       // import and export: the open family's layout only
  bool updating_ = false;  // showLayout setting the box must not re-plan
};

}  // namespace mosaic::ui
