#pragma once
// Recorded runs: the runs of a SQLite file in a table (strategy, rate, throughput, TTFT,
// turnaround, hit rate, swaps); select two to compare them side by side (per-layer hit rates and
// every metric with its ratio); a request's expert trace from a traced run; export a report of the
// selected runs (tables, charts, HTML, PDF).
#include <QWidget>

#include "workbench/engine_types.h"

class QCustomPlot;
class QLabel;
class QSpinBox;
class QStandardItemModel;
class QTableView;
class QTextEdit;

namespace mosaic::ui {

class Chart;
class ExpertTraceModel;

class RunsPanel : public QWidget {
  Q_OBJECT
 public:
  explicit RunsPanel(QWidget* parent = nullptr);
  void openDatabase(const QString& file);
  QString database() const { return database_; }
  QStandardItemModel* model() const { return model_; }
  QTableView* table() const { return table_; }
  Chart* comparePlot() const { return plot_; }
  QString comparison() const;
  QList<qint64> selectedRuns() const;
  void exportSelected(const QString& dir);
  QString statusText() const;
  ExpertTraceModel* trace() const { return trace_; }
  QSpinBox* requestBox() const { return request_; }
  void showTraceOfSelected();  // of the one selected run's chosen request

 public Q_SLOTS:
  void showRuns(const mosaic::ReportData& runs);
  void writeReport(const mosaic::ReportData& data, const QString& dir);
  void showError(const QString& message);
  void showTrace(const QString& title, const QString& target, int layers, const QStringList& labels,
                 const QVector<mosaic::ui::ExpertRoute>& routes);

 Q_SIGNALS:
  void loadRequested(const QString& database);
  void exportRequested(const QString& database, const QList<qint64>& runs, const QString& dir);
  void traceRequested(const QString& database, qint64 run, qint64 request);

 private:
  void compare();
  QString database_;
  ReportData data_;
  QStandardItemModel* model_;
  QTableView* table_;
  Chart* plot_;
  QTextEdit* details_;
  QLabel* status_;
  ExpertTraceModel* trace_;
  QSpinBox* request_;
  QLabel* trace_title_;
};

}  // namespace mosaic::ui
