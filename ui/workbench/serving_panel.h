#pragma once
#include <QMap>
// The serving dashboard: choose strategies, arrival rates and request lengths, start and stop a
// sweep on the open family, and watch it live — TTFT and turnaround of every request over the
// sweep's time, its runs one after another, each marked and named (swaps marked), completed requests
// per run, and per-layer hit rates of every run — replotted four times a second from what has
// arrived, never per request. Every run is recorded; every chart is a Chart (hover, toggles, log
// scale, export). Its HTTP tab serves the open session over the OpenAI API instead, and the same
// charts then show the external traffic live.
#include <QWidget>

#include "workbench/engine_types.h"

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QCPGraph;
class QLabel;
class QLineEdit;
class QListWidget;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QDoubleSpinBox;
class QTimer;

namespace mosaic::ui {

class Chart;
class ServerControls;

class ServingPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ServingPanel(QWidget* parent = nullptr);
  // The sweep the controls describe (mosaic.sweep/1); empty with an error shown when they are invalid.
  QString sweepJson() const;
  // The settings alone (no variants), as a session keeps them, and back.
  QString settingsJson() const;
  void applySettings(const QString& json);
  QLineEdit* databaseEdit() const { return database_; }
  QLineEdit* ratesEdit() const { return rates_; }
  QSpinBox* durationBox() const { return duration_; }
  QListWidget* strategyList() const { return strategies_; }
  Chart* latencyPlot() const { return latency_; }
  Chart* throughputPlot() const { return throughput_; }
  Chart* hitRatePlot() const { return hits_; }
  int pointsReceived() const { return points_; }
  int replots() const { return replots_; }
  QString statusText() const;
  QCheckBox* followLayoutBox() const { return follow_layout_; }
  QSpinBox* capacityBox() const { return capacity_; }
  QCheckBox* traceBox() const { return trace_; }
  QComboBox* clockBox() const { return clock_; }
  QComboBox* missBox() const { return miss_; }
  QComboBox* admissionBox() const { return admission_; }
  QSpinBox* setsBox() const { return sets_; }
  QCheckBox* swapAheadBox() const { return swap_ahead_; }
  QComboBox* profileBox() const { return profile_; }
  // The device profiles (mosaic.device/1) the simulated clock offers: every .json file in `dir`.
  void setDeviceProfileDir(const QString& dir);
  // The routing models (mosaic.routing/1) it offers beside uniform routing: every .json file in `dir`.
  void setRoutingModelDir(const QString& dir);
  QComboBox* routingBox() const { return routing_; }
  ServerControls* serverControls() const { return server_; }
  QTabWidget* tabs() const { return tabs_; }
  void start();

 public Q_SLOTS:
  void setFamily(const mosaic::ui::FamilyInfo& family);
  // The device the engine serves on ("cpu" or "cuda"): engine sweeps run there too.
  void setDevice(const QString& device);
  // The layout the Layout panel shows: what consolidated and no-reconfig serve while "follow" is on.
  void followLayout(const mosaic::ui::LayoutInfo& layout);
  // A sweep whose rates come from saturation: what was measured and chosen, shown while it runs.
  void ratesChosen(const QString& summary);
  // A strategy's saturation burst under way (Stop ends the sweep there too).
  void probeProgress(const QString& strategy, int done, int total);
  void runStarted(const QString& strategy, double rate, qint64 runId, int requests);
  void addPoint(const mosaic::ui::ServedPoint& point);
  void finished(const QString& summary, const QString& database);
  void showError(const QString& message);
  void httpStarted(const QString& url, qint64 runId, const QStringList& models);
  void httpModels(const QStringList& models);  // the family changed while the server ran
  void httpStopped(const QString& summary, const QString& database);
  void httpFailed(const QString& message);

 Q_SIGNALS:
  void startRequested(const QString& sweepJson, const QString& database);
  void stopRequested();
  void httpStartRequested(const mosaic::ui::HttpSettings& settings);
  void httpStopRequested();

 private:
  void refresh();
  void setRunning(bool running);
  void clearCharts();
  void setTimeAxis(const QString& label);
  void beginRun(const QString& label);  // a named line on the time axis; what follows is this run's
  QListWidget* strategies_;
  QLineEdit* rates_;
  QString rates_note_;  // the rates a saturation sweep chose
  QSpinBox* duration_;
  QSpinBox* prompt_;
  QSpinBox* output_;
  QSpinBox* capacity_;
  QCheckBox* follow_layout_;  // serve the Layout panel's capacity and policy
  QString layout_policy_ = QStringLiteral("round-robin");
  QVector<double> layout_shares_;  // the weighted policy's, with it
  qint64 layout_capacity_ = 0;
  qint64 layout_shared_ = -1;  // a hybrid layout's positions without deltas (shared base copies); -1 not hybrid
  // The Layout panel's virtual experts, which the virtual-experts strategy serves when following it.
  bool layout_virtual_ = false;
  qint64 layout_budget_ = 0;
  ReserveSettings layout_reserve_;
  QString layout_calibration_;
  QSpinBox* batch_;         // sequences per engine step (1: one request at a time)
  QComboBox* miss_;         // the miss policy of every strategy but virtual experts (which mask)
  QComboBox* admission_;    // affinity (the default) or fcfs
  QSpinBox* sets_;          // resident non-expert set buffers (K)
  QCheckBox* swap_ahead_;   // look-ahead swaps, where K ≥ 2 and the strategy's swaps can overlap
  QDoubleSpinBox* alpha_;   // traffic skew over the targets (1: even)
  QComboBox* clock_;
  QComboBox* profile_;      // the simulated clock's device profile: a file offered, or a path typed
  QComboBox* routing_;      // the simulated clock's routing: uniform, a file offered, or a path typed
  QCheckBox* trace_;        // record every request's expert trace
  QString device_ = QStringLiteral("cpu");  // the family's (Family panel), for engine clocks
  QTabWidget* tabs_;
  ServerControls* server_;
  bool sweeping_ = false;
  QLineEdit* database_;
  QPushButton* start_;
  QPushButton* stop_;
  QLabel* status_;
  Chart* latency_;
  Chart* throughput_;
  Chart* hits_;
  QTimer* timer_;
  QStringList variants_;
  QString run_label_;
  int run_index_ = -1;
  double run_offset_ = 0, sweep_end_ = 0;  // sweep time (s) at which the current run began, and of the last point
  QCPGraph* series(Chart* chart, const QString& name, int run, bool inLegend, bool filled, bool line);
  struct RunHits {
    QString label;
    QVector<qint64> hits, misses;  // per layer
  };
  QVector<RunHits> run_hits_;  // every run of the sweep, in order: one group of bars each
  int points_ = 0, replots_ = 0, completed_ = 0;
  QMap<QString, int> outcomes_;  // the run's finished requests by outcome
  bool dirty_ = false;
};

}  // namespace mosaic::ui
