#include "workbench/serving_panel.h"

#include "serving/strategy.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTimer>
#include <QVBoxLayout>

#include "serving/strategy.h"

#include "report/qcustomplot_include.h"
#include "workbench/layout_grid.h"

namespace mosaic::ui {

namespace {

QCustomPlot* make_plot(const QString& x, const QString& y) {
  auto* p = new QCustomPlot;
  p->setMinimumSize(260, 180);
  p->xAxis->setLabel(x);
  p->yAxis->setLabel(y);
  p->legend->setVisible(false);  // shown once a run has drawn something (an empty legend is a stray box)
  p->legend->setFont(QFont(p->font().family(), 8));
  p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  return p;
}

// The graph named `name` on `plot`, created on first use in the next palette colour.
QCPGraph* graph(QCustomPlot* plot, const QString& name, QCPScatterStyle::ScatterShape shape, bool line) {
  for (int i = 0; i < plot->graphCount(); ++i)
    if (plot->graph(i)->name() == name) return plot->graph(i);
  QCPGraph* g = plot->addGraph();
  g->setName(name);
  const QColor c = variantColor(plot->graphCount() - 1);
  g->setPen(QPen(c, 1.5));
  g->setLineStyle(line ? QCPGraph::lsStepLeft : QCPGraph::lsNone);
  g->setScatterStyle(QCPScatterStyle(shape, c, line ? 0 : 5));
  return g;
}

}  // namespace

ServingPanel::ServingPanel(QWidget* parent) : QWidget(parent), timer_(new QTimer(this)) {
  strategies_ = new QListWidget;
  for (std::string_view k : strategy_names()) {  // what the engine offers
    auto* item = new QListWidgetItem(QString::fromUtf8(k.data(), static_cast<qsizetype>(k.size())), strategies_);
    item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
    item->setCheckState(k == "consolidated" || k == "time-sharing" ? Qt::Checked : Qt::Unchecked);
  }
  strategies_->setMaximumHeight(130);
  rates_ = new QLineEdit(QStringLiteral("5, 20"));
  duration_ = new QSpinBox;
  duration_->setRange(1, 3600);
  duration_->setValue(10);
  duration_->setSuffix(tr(" s of arrivals"));
  prompt_ = new QSpinBox;
  prompt_->setRange(1, 4096);
  prompt_->setValue(20);
  prompt_->setSuffix(tr(" prompt tokens"));
  output_ = new QSpinBox;
  output_->setRange(1, 4096);
  output_->setValue(25);
  output_->setSuffix(tr(" output tokens"));
  capacity_ = new QSpinBox;
  capacity_->setRange(1, 1 << 20);
  capacity_->setSuffix(tr(" resident experts"));
  follow_layout_ = new QCheckBox(tr("the Layout panel's"));
  follow_layout_->setChecked(true);
  follow_layout_->setToolTip(tr("Consolidated and no-reconfig serve the layout on screen (its capacity and policy); "
                                "uncheck to serve another capacity, planned round-robin"));
  connect(follow_layout_, &QCheckBox::toggled, this, [this](bool on) {
    capacity_->setEnabled(!on);
    if (on && layout_capacity_ > 0) capacity_->setValue(static_cast<int>(layout_capacity_));
  });
  capacity_->setEnabled(false);
  batch_ = new QSpinBox;
  batch_->setRange(1, 4096);
  batch_->setValue(256);
  batch_->setSuffix(tr(" sequences per step"));
  batch_->setToolTip(tr("Continuous batching: how many requests one engine step may run together (1: one at a time, as the paper serves)"));
  alpha_ = new QDoubleSpinBox;
  alpha_->setRange(0.05, 1.0);
  alpha_->setSingleStep(0.05);
  alpha_->setValue(1.0);
  alpha_->setPrefix(tr("skew α "));
  alpha_->setToolTip(tr("Requests per target as ExpertWeave and S-LoRA draw them: 1 spreads them evenly, smaller values send most to the first targets"));
  clock_ = new QComboBox;
  clock_->addItems({QStringLiteral("virtual"), QStringLiteral("real")});
  database_ = new QLineEdit(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/runs.sqlite"));
  start_ = new QPushButton(tr("Start"));
  stop_ = new QPushButton(tr("Stop"));
  status_ = new QLabel(tr("Open a family, choose strategies and rates, then Start."));
  status_->setWordWrap(true);
  latency_ = make_plot(tr("time in run (s)"), tr("ms"));
  throughput_ = make_plot(tr("time in run (s)"), tr("completed requests"));
  hits_ = make_plot(tr("layer"), tr("hit rate"));
  hits_->legend->setVisible(false);
  hits_->yAxis->setRange(0, 1.05);

  auto* form = new QFormLayout;
  form->addRow(tr("Strategies"), strategies_);
  form->addRow(tr("Rates (req/s)"), rates_);
  form->addRow(tr("Duration"), duration_);
  form->addRow(tr("Lengths"), prompt_);
  form->addRow(QString(), output_);
  auto* layoutRow = new QHBoxLayout;
  layoutRow->addWidget(capacity_, 1);
  layoutRow->addWidget(follow_layout_);
  form->addRow(tr("Layout"), layoutRow);
  form->addRow(tr("Batching"), batch_);
  form->addRow(tr("Traffic"), alpha_);
  form->addRow(tr("Clock"), clock_);
  form->addRow(tr("Record to"), database_);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(start_);
  buttons->addWidget(stop_);
  auto* left = new QVBoxLayout;
  left->addLayout(form);
  left->addLayout(buttons);
  left->addWidget(status_);
  left->addStretch();
  auto* charts = new QGridLayout;
  charts->addWidget(latency_, 0, 0, 1, 2);
  charts->addWidget(throughput_, 1, 0);
  charts->addWidget(hits_, 1, 1);
  auto* layout = new QHBoxLayout(this);
  layout->addLayout(left);
  layout->addLayout(charts, 1);

  connect(start_, &QPushButton::clicked, this, &ServingPanel::start);
  connect(stop_, &QPushButton::clicked, this, &ServingPanel::stopRequested);
  timer_->setInterval(250);  // ≥ 2 refreshes a second, whatever the request rate
  connect(timer_, &QTimer::timeout, this, &ServingPanel::refresh);
  setRunning(false);
  start_->setEnabled(false);
}

void ServingPanel::followLayout(const LayoutInfo& layout) {
  layout_capacity_ = layout.capacity;
  layout_policy_ = layout.policy;
  layout_shares_ = layout.shares;
  follow_layout_->setText(tr("the Layout panel's (%1)").arg(layout.policy));
  if (follow_layout_->isChecked()) capacity_->setValue(static_cast<int>(layout.capacity));
}

void ServingPanel::setFamily(const FamilyInfo& family) {
  variants_.clear();
  for (const VariantInfo& v : family.variants) variants_ << v.dir;
  capacity_->setValue(std::max(1, family.layers * family.experts / 2));
  start_->setEnabled(variants_.size() >= 2);
  status_->setStyleSheet(QString());
  status_->setText(variants_.size() < 2 ? tr("Serving compares strategies over at least two variants.")
                                        : tr("%1 variants open: choose strategies and rates, then Start.").arg(variants_.size()));
}

QString ServingPanel::sweepJson() const {
  QJsonArray rates, strategies;
  for (const QString& r : rates_->text().split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    bool ok = false;
    const double v = r.trimmed().toDouble(&ok);
    if (!ok || v <= 0) return {};
    rates.append(v);
  }
  for (int i = 0; i < strategies_->count(); ++i)
    if (strategies_->item(i)->checkState() == Qt::Checked) {
      QJsonObject s{{QStringLiteral("kind"), strategies_->item(i)->text()},
                    {QStringLiteral("capacity"), capacity_->value()},
                    {QStringLiteral("policy"), follow_layout_->isChecked() ? layout_policy_ : QStringLiteral("round-robin")},
                    {QStringLiteral("max_sequences"), batch_->value()}};
      if (follow_layout_->isChecked() && !layout_shares_.isEmpty()) {
        QJsonArray shares;
        for (double x : layout_shares_) shares.append(x);
        s.insert(QStringLiteral("shares"), shares);
      }
      strategies.append(s);
    }
  if (rates.isEmpty() || strategies.isEmpty()) return {};
  const QJsonObject sweep{{QStringLiteral("schema"), QStringLiteral("mosaic.sweep/1")},
                          {QStringLiteral("variants"), QJsonArray::fromStringList(variants_)},
                          {QStringLiteral("clock"), clock_->currentText()},
                          {QStringLiteral("rates"), rates},
                          {QStringLiteral("duration_seconds"), duration_->value()},
                          {QStringLiteral("alpha"), alpha_->value()},
                          {QStringLiteral("prompt"), QJsonArray{prompt_->value(), prompt_->value()}},
                          {QStringLiteral("output"), QJsonArray{output_->value(), output_->value()}},
                          {QStringLiteral("strategies"), strategies}};
  return QString::fromUtf8(QJsonDocument(sweep).toJson(QJsonDocument::Compact));
}

QString ServingPanel::settingsJson() const {
  const QString sweep = sweepJson();
  if (sweep.isEmpty()) return {};
  QJsonObject o = QJsonDocument::fromJson(sweep.toUtf8()).object();
  o.remove(QStringLiteral("variants"));
  return QString::fromUtf8(QJsonDocument(o).toJson(QJsonDocument::Compact));
}

void ServingPanel::applySettings(const QString& json) {
  const QJsonObject o = QJsonDocument::fromJson(json.toUtf8()).object();
  if (o.isEmpty()) return;
  QStringList rates;
  for (const auto& r : o.value(QStringLiteral("rates")).toArray()) rates << QString::number(r.toDouble());
  if (!rates.isEmpty()) rates_->setText(rates.join(QStringLiteral(", ")));
  if (o.contains(QStringLiteral("duration_seconds"))) duration_->setValue(o.value(QStringLiteral("duration_seconds")).toInt());
  if (o.contains(QStringLiteral("prompt"))) prompt_->setValue(o.value(QStringLiteral("prompt")).toArray().first().toInt());
  if (o.contains(QStringLiteral("output"))) output_->setValue(o.value(QStringLiteral("output")).toArray().first().toInt());
  if (o.value(QStringLiteral("clock")).toString() == QStringLiteral("real")) clock_->setCurrentText(QStringLiteral("real"));
  if (o.contains(QStringLiteral("alpha"))) alpha_->setValue(o.value(QStringLiteral("alpha")).toDouble());
  const QJsonArray strategies = o.value(QStringLiteral("strategies")).toArray();
  if (strategies.isEmpty()) return;
  for (int i = 0; i < strategies_->count(); ++i) strategies_->item(i)->setCheckState(Qt::Unchecked);
  for (const auto& sv : strategies) {
    const QJsonObject so = sv.toObject();
    for (int i = 0; i < strategies_->count(); ++i)
      if (strategies_->item(i)->text() == so.value(QStringLiteral("kind")).toString()) strategies_->item(i)->setCheckState(Qt::Checked);
    if (so.contains(QStringLiteral("capacity")) && !follow_layout_->isChecked()) capacity_->setValue(so.value(QStringLiteral("capacity")).toInt());
    if (so.contains(QStringLiteral("max_sequences"))) batch_->setValue(so.value(QStringLiteral("max_sequences")).toInt());
  }
}

void ServingPanel::start() {
  const QString json = sweepJson();
  if (json.isEmpty()) return showError(tr("Check at least one strategy and give rates as positive numbers, e.g. 5, 20."));
  QDir().mkpath(QFileInfo(database_->text()).absolutePath());
  for (QCustomPlot* p : {latency_, throughput_, hits_}) {
    p->clearGraphs();
    p->clearPlottables();
  }
  points_ = completed_ = 0;
  run_hits_.clear();
  setRunning(true);
  status_->setStyleSheet(QString());
  status_->setText(tr("Starting…"));
  Q_EMIT startRequested(json, database_->text());
}

void ServingPanel::runStarted(const QString& strategy, double rate, qint64 runId, int requests) {
  run_label_ = tr("%1 @ %2 req/s").arg(strategy).arg(rate);
  completed_ = 0;
  run_hits_.push_back({run_label_, {}, {}});
  status_->setText(tr("Run %1: %2, %3 requests").arg(runId).arg(run_label_).arg(requests));
}

void ServingPanel::addPoint(const ServedPoint& p) {
  ++points_;
  ++completed_;
  graph(latency_, run_label_ + tr(" TTFT"), QCPScatterStyle::ssDisc, false)->addData(p.finish, p.ttft * 1e3);
  graph(latency_, run_label_ + tr(" turnaround"), QCPScatterStyle::ssCircle, false)->addData(p.finish, p.turnaround * 1e3);
  if (p.swaps > 0) graph(latency_, tr("swap before the request"), QCPScatterStyle::ssCross, false)->addData(p.finish, p.ttft * 1e3);
  graph(throughput_, run_label_, QCPScatterStyle::ssNone, true)->addData(p.finish, completed_);
  if (run_hits_.isEmpty()) run_hits_.push_back({run_label_, {}, {}});
  RunHits& r = run_hits_.back();
  r.hits.resize(p.hits.size());
  r.misses.resize(p.misses.size());
  for (int l = 0; l < p.hits.size(); ++l) {
    r.hits[l] += p.hits[l];
    r.misses[l] += p.misses[l];
  }
  status_->setText(tr("%1: %2 of %3 requests").arg(run_label_).arg(p.done).arg(p.total));
  dirty_ = true;
}

void ServingPanel::refresh() {
  if (!dirty_) return;
  dirty_ = false;
  // One bar per layer for each run of the sweep, side by side, labelled in the legend.
  hits_->clearPlottables();
  static const QColor palette[] = {QColor(0x2ca02c), QColor(0x1f77b4), QColor(0xff7f0e), QColor(0x9467bd), QColor(0x8c564b), QColor(0xe377c2)};
  auto* group = new QCPBarsGroup(hits_);
  int layers = 0;
  const double width = 0.8 / std::max<qsizetype>(1, run_hits_.size());
  for (qsizetype i = 0; i < run_hits_.size(); ++i) {
    const RunHits& run = run_hits_[i];
    auto* bars = new QCPBars(hits_->xAxis, hits_->yAxis);
    bars->setName(run.label);
    bars->setBrush(palette[i % std::size(palette)]);
    bars->setPen(Qt::NoPen);
    bars->setWidth(width);
    bars->setBarsGroup(group);
    layers = std::max(layers, static_cast<int>(run.hits.size()));
    for (int l = 0; l < run.hits.size(); ++l) {
      const qint64 n = run.hits[l] + run.misses[l];
      if (n > 0) bars->addData(l, static_cast<double>(run.hits[l]) / static_cast<double>(n));
    }
  }
  hits_->legend->setVisible(!run_hits_.isEmpty());
  hits_->xAxis->setRange(-0.6, layers - 0.4);
  for (QCustomPlot* p : {latency_, throughput_}) {
    p->rescaleAxes();
    p->legend->setVisible(p->graphCount() > 0);
  }
  for (QCustomPlot* p : {latency_, throughput_, hits_}) p->replot(QCustomPlot::rpQueuedReplot);
  ++replots_;
}

void ServingPanel::finished(const QString& summary, const QString&) {
  refresh();
  setRunning(false);
  status_->setText(summary);
}

void ServingPanel::showError(const QString& message) {
  setRunning(false);
  status_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
  status_->setText(message);
}

QString ServingPanel::statusText() const { return status_->text(); }

void ServingPanel::setRunning(bool running) {
  start_->setEnabled(!running && variants_.size() >= 2);
  stop_->setEnabled(running);
  if (running) timer_->start();
  else timer_->stop();
}

}  // namespace mosaic::ui
