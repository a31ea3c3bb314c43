#include "workbench/serving_panel.h"

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
#include <QScrollArea>
#include <QScrollBar>
#include <QSet>
#include <QSpinBox>
#include <QTabWidget>
#include <QStandardPaths>
#include <QTimer>
#include <QUrl>
#include <QVBoxLayout>

#include "runtime/miss_policy.h"
#include "serving/strategy.h"

#include "report/qcustomplot_include.h"
#include "report/plot_export.h"
#include "workbench/chart.h"
#include "workbench/layout_grid.h"
#include "workbench/server_controls.h"

namespace mosaic::ui {

ServingPanel::ServingPanel(QWidget* parent) : QWidget(parent), timer_(new QTimer(this)) {
  strategies_ = new QListWidget;
  for (std::string_view k : strategy_names()) {  // what the engine offers
    auto* item = new QListWidgetItem(QString::fromUtf8(k.data(), static_cast<qsizetype>(k.size())), strategies_);
    item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
    item->setCheckState(k == "consolidated" || k == "time-sharing" ? Qt::Checked : Qt::Unchecked);
  }
  strategies_->setMaximumHeight(130);
  rates_ = new QLineEdit(QStringLiteral("5, 20"));
  rates_->setToolTip(tr("Total arrival rates in requests/s, e.g. 5, 20, 80; or “saturation” (optionally “saturation 8” for 8 points): "
                        "each strategy first serves a burst to measure its saturation rate, then the rates run from a quarter of "
                        "the slowest strategy's to twice the fastest's, each strategy stopping at twice its own."));
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
  miss_ = new QComboBox;
  for (std::string_view m : miss_policy_names()) miss_->addItem(QString::fromUtf8(m.data(), static_cast<qsizetype>(m.size())));
  miss_->setToolTip(tr("What a miss does: transient loads the expert, uses it and drops it (the paper); lru keeps it in spare "
                       "slots; prefetch also loads the next layer's likely experts while a layer computes, where that has paid (prefetch-always: "
                       "everywhere, to measure the predictor); masked never loads "
                       "(the router chooses among resident experts). Virtual experts always mask."));
  sets_ = new QSpinBox;
  sets_->setRange(0, 8);
  sets_->setSpecialValueText(tr("set buffers auto"));
  sets_->setPrefix(tr("set buffers "));
  sets_->setValue(0);
  sets_->setToolTip(tr("Non-expert weight sets resident at once, budget permitting. auto: every set the variants use (with a "
                       "budget and no capacity, room for a second when it costs at most 1/8 of the resident experts); 1: the "
                       "paper's one set, swapped as targets change"));
  swap_ahead_ = new QCheckBox(tr("swap ahead"));
  swap_ahead_->setChecked(true);
  swap_ahead_->setToolTip(tr("With 2 or more set buffers: a waiting request's non-expert set is copied into a free buffer while the "
                             "batch decodes, and the request joins once it is in (not for time-sharing or space-sharing, whose "
                             "swaps cannot overlap a step). On unless cleared"));
  connect(sets_, &QSpinBox::valueChanged, this, [this](int k) { swap_ahead_->setEnabled(k != 1); });
  admission_ = new QComboBox;
  admission_->addItem(tr("affinity admission"), QStringLiteral("affinity"));
  admission_->addItem(tr("arrival order (fcfs)"), QStringLiteral("fcfs"));
  admission_->setToolTip(tr("affinity: requests of resident sets first, then the set with the most queued work (its wait weighed "
                            "against the fairness bound, after which the oldest goes first); with every set buffer busy, the "
                            "sets take turns in the order they began to wait; fcfs: strictly in arrival order, the paper's setting"));
  alpha_ = new QDoubleSpinBox;
  alpha_->setRange(0.05, 1.0);
  alpha_->setSingleStep(0.05);
  alpha_->setValue(1.0);
  alpha_->setPrefix(tr("skew α "));
  alpha_->setToolTip(tr("Requests per target as ExpertWeave and S-LoRA draw them: 1 spreads them evenly, smaller values send most to the first targets"));
  clock_ = new QComboBox;
  clock_->addItems({QStringLiteral("virtual"), QStringLiteral("real"), QStringLiteral("simulated")});
  clock_->setToolTip(tr("virtual: the engine's measured work, without idle waits; real: wall time; simulated: the engine serves a "
                        "simulated device that computes nothing and prices each step with the cost model on the device profile "
                        "(a family too large for this machine, from its config files alone: config.json, and an ESFT adapter's "
                        "expert_cfg.json or a delta folder's delta.json beside it)"));
  profile_ = new QComboBox;
  profile_->setEditable(true);  // a profile of one's own: its path
  profile_->setEnabled(false);
  profile_->setToolTip(tr("The device the simulated clock prices steps on (mosaic.device/1; mosaic-cli bench-device measures one)"));
  routing_ = new QComboBox;
  routing_->setEditable(true);  // a routing model of one's own: its path
  routing_->setEnabled(false);
  routing_->addItem(tr("uniform routing"), QString());
  routing_->setToolTip(tr("How the simulated clock's tokens choose experts: uniformly, or as a real router spreads a prompt "
                          "(mosaic.routing/1; mosaic-cli routing measures one on text, or fits one to a published overlap)"));
  trace_ = new QCheckBox(tr("record expert traces"));
  trace_->setToolTip(tr("Record where every token's router choices went, per request: the Runs panel shows a request's expert trace "
                        "(a little slower, and a bigger record)"));
  database_ = new QLineEdit(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/runs.sqlite"));
  start_ = new QPushButton(tr("Start"));
  stop_ = new QPushButton(tr("Stop"));
  status_ = new QLabel(tr("Open a family, choose strategies and rates, then Start."));
  status_->setWordWrap(true);
  latency_ = new Chart(tr("Latency of each request"), QString(), tr("latency (ms)"));
  throughput_ = new Chart(tr("Completed requests per run"), QString(), tr("requests done"));
  hits_ = new Chart(tr("Expert hit rate per layer"), tr("layer"), tr("hit rate"));
  setTimeAxis(tr("time in sweep (s)"));
  for (Chart* c : {latency_, throughput_, hits_}) {
    c->setPlaceholder(tr("No data yet — press Start (or start the HTTP server and send requests)"));
    c->setMinimumHeight(140);  // two rows of them fit the dock's share of a 1366×768 screen without scrolling
  }
  hits_->yAxis->setRange(0, 1.05);
  for (Chart* c : {latency_, throughput_, hits_}) connect(c, &Chart::exported, status_, &QLabel::setText);

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
  auto* engineRow = new QHBoxLayout;
  engineRow->addWidget(miss_);
  engineRow->addWidget(sets_);
  engineRow->addWidget(swap_ahead_);
  engineRow->addWidget(admission_);
  form->addRow(tr("Misses, sets"), engineRow);
  form->addRow(tr("Traffic"), alpha_);
  connect(clock_, &QComboBox::currentTextChanged, this, [this](const QString& clock) {
    const bool simulated = clock == QLatin1String("simulated");
    profile_->setEnabled(simulated);
    routing_->setEnabled(simulated);
    trace_->setEnabled(!simulated);
  });
  auto* clockRow = new QHBoxLayout;
  clockRow->addWidget(clock_);
  clockRow->addWidget(profile_, 1);
  clockRow->addWidget(routing_, 1);
  form->addRow(tr("Clock"), clockRow);
  form->addRow(tr("Traces"), trace_);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(start_);
  buttons->addWidget(stop_);
  // Start and Stop above the form, which scrolls within the tab: in a dock of half a 1366×768 screen
  // (or a third of 1920×1080) the whole form was taller than the dock, and Start lay below the fold.
  auto* formWidget = new QWidget;
  formWidget->setLayout(form);
  auto* formScroll = new QScrollArea;
  formScroll->setWidget(formWidget);
  formScroll->setWidgetResizable(true);
  formScroll->setFrameShape(QFrame::NoFrame);
  formScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  formScroll->setMinimumWidth(formWidget->sizeHint().width() + formScroll->verticalScrollBar()->sizeHint().width());
  auto* sweep = new QWidget;
  auto* sweepLayout = new QVBoxLayout(sweep);
  sweepLayout->setContentsMargins(0, 0, 0, 0);
  sweepLayout->addLayout(buttons);
  sweepLayout->addWidget(formScroll, 1);
  server_ = new ServerControls;
  tabs_ = new QTabWidget;
  tabs_->addTab(sweep, tr("Sweep"));
  tabs_->addTab(server_, tr("HTTP server"));
  tabs_->setToolTip(tr("A sweep replays a synthetic workload per strategy; the HTTP server serves whoever calls it"));
  auto* record = new QFormLayout;
  record->addRow(tr("Record to"), database_);
  auto* left = new QVBoxLayout;
  left->addWidget(tabs_, 1);
  left->addLayout(record);
  left->addWidget(status_);
  auto* charts = new QGridLayout;
  charts->addWidget(latency_, 0, 0, 1, 2);
  charts->addWidget(throughput_, 1, 0);
  charts->addWidget(hits_, 1, 1);
  auto* layout = new QHBoxLayout(this);
  layout->addLayout(left);
  layout->addLayout(charts, 1);

  connect(start_, &QPushButton::clicked, this, &ServingPanel::start);
  connect(stop_, &QPushButton::clicked, this, &ServingPanel::stopRequested);
  connect(server_, &ServerControls::startRequested, this, [this] {
    HttpSettings settings = server_->settings();
    settings.database = database_->text().trimmed();
    if (!settings.database.isEmpty()) QDir().mkpath(QFileInfo(settings.database).absolutePath());
    clearCharts();
    status_->setStyleSheet(QString());
    status_->setText(tr("Starting the HTTP server…"));
    Q_EMIT httpStartRequested(settings);
  });
  connect(server_, &ServerControls::stopRequested, this, &ServingPanel::httpStopRequested);
  timer_->setInterval(250);  // ≥ 2 refreshes a second, whatever the request rate
  connect(timer_, &QTimer::timeout, this, &ServingPanel::refresh);
  setRunning(false);
  start_->setEnabled(false);
}

void ServingPanel::followLayout(const LayoutInfo& layout) {
  layout_capacity_ = layout.capacity;
  layout_policy_ = layout.policy;
  layout_shares_ = layout.shares;
  // A hybrid layout is not a consolidation policy: the hybrid strategy serves it (sharing the
  // positions the layout shares); the consolidated strategies serve round-robin at its capacity.
  const bool hybrid = layout.policy == QLatin1String("hybrid");
  layout_shared_ = hybrid ? layout.positions - layout.delta_positions : -1;
  layout_virtual_ = layout.policy == QLatin1String("virtual");
  layout_budget_ = layout.budget;
  layout_reserve_ = layout.reserve_settings;
  layout_calibration_ = layout.virtual_calibration;
  follow_layout_->setText(hybrid           ? tr("the Layout panel's (hybrid: %1 shared positions)").arg(layout_shared_)
                          : layout_virtual_ ? tr("the Layout panel's (virtual experts at its budget)")
                                            : tr("the Layout panel's (%1)").arg(layout.policy));
  if (follow_layout_->isChecked()) capacity_->setValue(static_cast<int>(layout.capacity));
}

void ServingPanel::setFamily(const FamilyInfo& family) {
  variants_.clear();
  for (const VariantInfo& v : family.variants) variants_ << v.dir;
  capacity_->setValue(std::max(1, family.layers * family.experts / 2));
  start_->setEnabled(variants_.size() >= 2 && !server_->isServing());
  server_->setAvailable(!variants_.isEmpty() && !sweeping_);
  if (server_->isServing()) return;  // the family changed under the server: its status stays
  status_->setStyleSheet(QString());
  status_->setText(variants_.size() < 2 ? tr("Serving compares strategies over at least two variants.")
                                        : tr("%1 variants open: choose strategies and rates, then Start.").arg(variants_.size()));
}

namespace {
// Every .json file of `dir`, by name, its path the item's data; `keep` first items stay.
void offer_files(QComboBox* box, const QString& dir, int keep) {
  while (box->count() > keep) box->removeItem(box->count() - 1);
  for (const QFileInfo& f : QDir(dir).entryInfoList({QStringLiteral("*.json")}, QDir::Files, QDir::Name))
    box->addItem(f.completeBaseName(), f.absoluteFilePath());
}
// Selects the item whose data is `path`, or shows the path typed.
void select_file(QComboBox* box, const QString& path) {
  int at = -1;
  for (int i = 0; i < box->count(); ++i)
    if (box->itemData(i).toString() == path) at = i;
  if (at >= 0) box->setCurrentIndex(at);
  else box->setCurrentText(path);
}
// The file chosen: an offered item's path (empty for one standing for none), or the path typed.
QString chosen_file(const QComboBox* box) {
  const int at = box->findText(box->currentText());
  return at >= 0 && box->itemData(at).isValid() ? box->itemData(at).toString() : box->currentText();
}
}  // namespace

QString ServingPanel::sweepJson() const {
  QJsonArray rates, strategies;
  QJsonValue rates_value = rates;
  const QString rates_text = rates_->text().trimmed();
  if (rates_text.startsWith(QLatin1String("saturation"), Qt::CaseInsensitive)) {
    // "saturation [points]": the engine measures each strategy's saturation rate and chooses.
    QJsonObject saturation;
    const QString points = rates_text.mid(10).trimmed();
    if (!points.isEmpty()) {
      bool ok = false;
      const int n = points.toInt(&ok);
      if (!ok || n < 2 || n > 64) return {};
      saturation.insert(QStringLiteral("points"), n);
    }
    rates_value = QJsonObject{{QStringLiteral("saturation"), saturation}};
  } else {
    for (const QString& r : rates_text.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
      bool ok = false;
      const double v = r.trimmed().toDouble(&ok);
      if (!ok || v <= 0) return {};
      rates.append(v);
    }
    if (rates.isEmpty()) return {};
    rates_value = rates;
  }
  for (int i = 0; i < strategies_->count(); ++i)
    if (strategies_->item(i)->checkState() == Qt::Checked) {
      const QString kind = strategies_->item(i)->text();
      const bool follow = follow_layout_->isChecked(), hybrid = layout_shared_ >= 0;
      const qint64 capacity = follow && hybrid && kind == QLatin1String("hybrid") ? layout_shared_ : capacity_->value();
      // A virtual layout is no consolidation policy: the consolidated strategies serve round-robin.
      const bool consolidating = follow && !hybrid && !layout_virtual_;
      QJsonObject s{{QStringLiteral("kind"), kind},
                    {QStringLiteral("capacity"), capacity},
                    {QStringLiteral("policy"), consolidating ? layout_policy_ : QStringLiteral("round-robin")},
                    {QStringLiteral("max_sequences"), batch_->value()}};
      // Only what differs from the engine's defaults, so that older sessions read the same.
      if (miss_->currentText() != QLatin1String("transient") && kind != QLatin1String("virtual-experts"))
        s.insert(QStringLiteral("miss"), miss_->currentText());
      if (sets_->value() > 0) s.insert(QStringLiteral("resident_sets"), sets_->value());  // auto is the default
      if (swap_ahead_->isEnabled() && !swap_ahead_->isChecked() && kind != QLatin1String("time-sharing") && kind != QLatin1String("space-sharing"))
        s.insert(QStringLiteral("swap_ahead"), false);  // on by default where K ≥ 2
      if (admission_->currentData().toString() == QLatin1String("fcfs")) s.insert(QStringLiteral("admission"), QStringLiteral("fcfs"));
      if (kind == QLatin1String("virtual-experts") && follow && layout_virtual_) {
        // The Layout panel's plan: the same budget, counts planned on the same text (or uniform).
        s.remove(QStringLiteral("capacity"));
        s.insert(QStringLiteral("budget"), QString::number(layout_budget_));
        s.insert(QStringLiteral("kv_context"), layout_reserve_.context);
        s.insert(QStringLiteral("kv_requests"), layout_reserve_.requests);
        s.insert(QStringLiteral("max_batch_tokens"), layout_reserve_.prefill_chunk);
        if (!layout_calibration_.isEmpty()) s.insert(QStringLiteral("calibration"), layout_calibration_);
      }
      if (follow_layout_->isChecked() && !layout_shares_.isEmpty()) {
        QJsonArray shares;
        for (double x : layout_shares_) shares.append(x);
        s.insert(QStringLiteral("shares"), shares);
      }
      strategies.append(s);
    }
  if (strategies.isEmpty()) return {};
  const QJsonObject sweep{{QStringLiteral("schema"), QStringLiteral("mosaic.sweep/1")},
                          {QStringLiteral("variants"), QJsonArray::fromStringList(variants_)},
                          {QStringLiteral("clock"), clock_->currentText()},
                          {QStringLiteral("rates"), rates_value},
                          {QStringLiteral("duration_seconds"), duration_->value()},
                          {QStringLiteral("alpha"), alpha_->value()},
                          {QStringLiteral("prompt"), QJsonArray{prompt_->value(), prompt_->value()}},
                          {QStringLiteral("output"), QJsonArray{output_->value(), output_->value()}},
                          {QStringLiteral("strategies"), strategies}};
  QJsonObject out = sweep;
  if (clock_->currentText() == QLatin1String("simulated")) {
    const QString path = chosen_file(profile_);
    if (path.isEmpty()) return {};
    out.insert(QStringLiteral("device_profile"), path);
    if (const QString routing = chosen_file(routing_); !routing.isEmpty()) out.insert(QStringLiteral("routing"), routing);
  } else {
    out.insert(QStringLiteral("device"), device_);  // the engine's backend: the family's device
    if (trace_->isChecked()) out.insert(QStringLiteral("trace_routes"), true);  // nothing routes on the simulated clock
  }
  return QString::fromUtf8(QJsonDocument(out).toJson(QJsonDocument::Compact));
}


void ServingPanel::setDevice(const QString& device) { device_ = device; }

void ServingPanel::setDeviceProfileDir(const QString& dir) { offer_files(profile_, dir, 0); }

void ServingPanel::setRoutingModelDir(const QString& dir) { offer_files(routing_, dir, 1); }

QString ServingPanel::settingsJson() const {
  const QString sweep = sweepJson();
  if (sweep.isEmpty()) return {};
  QJsonObject o = QJsonDocument::fromJson(sweep.toUtf8()).object();
  o.remove(QStringLiteral("variants"));
  o.remove(QStringLiteral("device"));  // the family's, which a session keeps beside these
  return QString::fromUtf8(QJsonDocument(o).toJson(QJsonDocument::Compact));
}

void ServingPanel::applySettings(const QString& json) {
  const QJsonObject o = QJsonDocument::fromJson(json.toUtf8()).object();
  if (o.isEmpty()) return;
  QStringList rates;
  for (const auto& r : o.value(QStringLiteral("rates")).toArray()) rates << QString::number(r.toDouble());
  if (!rates.isEmpty()) rates_->setText(rates.join(QStringLiteral(", ")));
  const QJsonValue saturation = o.value(QStringLiteral("rates")).toObject().value(QStringLiteral("saturation"));
  if (saturation.isObject()) {
    const int points = saturation.toObject().value(QStringLiteral("points")).toInt();
    rates_->setText(points > 0 ? QStringLiteral("saturation %1").arg(points) : QStringLiteral("saturation"));
  }
  if (o.contains(QStringLiteral("duration_seconds"))) duration_->setValue(o.value(QStringLiteral("duration_seconds")).toInt());
  if (o.contains(QStringLiteral("prompt"))) prompt_->setValue(o.value(QStringLiteral("prompt")).toArray().first().toInt());
  if (o.contains(QStringLiteral("output"))) output_->setValue(o.value(QStringLiteral("output")).toArray().first().toInt());
  clock_->setCurrentText(o.value(QStringLiteral("clock")).toString(QStringLiteral("virtual")));
  if (o.contains(QStringLiteral("device_profile"))) select_file(profile_, o.value(QStringLiteral("device_profile")).toString());
  select_file(routing_, o.value(QStringLiteral("routing")).toString());
  if (o.contains(QStringLiteral("alpha"))) alpha_->setValue(o.value(QStringLiteral("alpha")).toDouble());
  trace_->setChecked(o.value(QStringLiteral("trace_routes")).toBool());
  const QJsonArray strategies = o.value(QStringLiteral("strategies")).toArray();
  if (strategies.isEmpty()) return;
  for (int i = 0; i < strategies_->count(); ++i) strategies_->item(i)->setCheckState(Qt::Unchecked);
  miss_->setCurrentText(QStringLiteral("transient"));
  sets_->setValue(0);
  swap_ahead_->setChecked(true);
  admission_->setCurrentIndex(0);
  for (const auto& sv : strategies) {
    const QJsonObject so = sv.toObject();
    if (so.contains(QStringLiteral("miss"))) miss_->setCurrentText(so.value(QStringLiteral("miss")).toString());
    if (so.value(QStringLiteral("resident_sets")).isDouble()) sets_->setValue(so.value(QStringLiteral("resident_sets")).toInt());
    if (so.contains(QStringLiteral("swap_ahead"))) swap_ahead_->setChecked(so.value(QStringLiteral("swap_ahead")).toBool());
    for (const char* key : {"admission", "switching"})
      if (so.value(QLatin1String(key)).toString() == QLatin1String("fcfs")) admission_->setCurrentIndex(1);
    for (int i = 0; i < strategies_->count(); ++i)
      if (strategies_->item(i)->text() == so.value(QStringLiteral("kind")).toString()) strategies_->item(i)->setCheckState(Qt::Checked);
    if (so.contains(QStringLiteral("capacity")) && !follow_layout_->isChecked()) capacity_->setValue(so.value(QStringLiteral("capacity")).toInt());
    if (so.contains(QStringLiteral("max_sequences"))) batch_->setValue(so.value(QStringLiteral("max_sequences")).toInt());
  }
}

void ServingPanel::start() {
  const QString json = sweepJson();
  if (json.isEmpty())
    return showError(tr("Check at least one strategy and give rates as positive numbers, e.g. 5, 20, or “saturation” "
                        "(optionally with a number of points, e.g. saturation 8)."));
  rates_note_.clear();
  QDir().mkpath(QFileInfo(database_->text()).absolutePath());
  clearCharts();
  setTimeAxis(tr("time in sweep (s)"));
  setRunning(true);
  status_->setStyleSheet(QString());
  status_->setText(tr("Starting…"));
  Q_EMIT startRequested(json, database_->text());
}

// The time axes' label; the latency chart's says what its two markers are (its y label is too short for it).
void ServingPanel::setTimeAxis(const QString& label) {
  latency_->xAxis->setLabel(label + tr(" · ● TTFT, ○ turnaround"));
  throughput_->xAxis->setLabel(label);
}

void ServingPanel::clearCharts() {
  for (Chart* p : {latency_, throughput_, hits_}) {
    p->clearGraphs();
    p->clearPlottables();
    p->clearItems();
    p->layOutLegend();
  }
  points_ = completed_ = 0;
  run_index_ = -1;
  run_offset_ = sweep_end_ = 0;
  run_hits_.clear();
}

void ServingPanel::ratesChosen(const QString& summary) {
  rates_note_ = summary;
  status_->setText(summary);
}

void ServingPanel::probeProgress(const QString& strategy, int done, int total) {
  status_->setText(tr("Measuring %1's saturation rate: a burst of %2 requests, %3 finished").arg(strategy).arg(total).arg(done));
}

void ServingPanel::runStarted(const QString& strategy, double rate, qint64 runId, int requests) {
  beginRun(tr("%1 @ %2 req/s").arg(strategy).arg(rate));
  status_->setText(tr("Run %1: %2, %3 requests").arg(runId).arg(run_label_).arg(requests) +
                   (rates_note_.isEmpty() ? QString() : QStringLiteral("\n") + rates_note_));
}

void ServingPanel::httpStarted(const QString& url, qint64 runId, const QStringList& models) {
  server_->started(url, runId, models);
  start_->setEnabled(false);
  clearCharts();  // a serve run on charts of its own: the last sweep's axes would hide its first requests
  setTimeAxis(tr("time serving (s)"));
  beginRun(tr("HTTP %1").arg(QUrl(url).port() > 0 ? QStringLiteral(":%1").arg(QUrl(url).port()) : url));
  timer_->start();
  status_->setText(runId > 0 ? tr("Serving at %1; every request is recorded as run %2 and charted here.").arg(url).arg(runId)
                             : tr("Serving at %1; every request is charted here (not recorded: no database given).").arg(url));
}

void ServingPanel::httpModels(const QStringList& models) { server_->setModels(models); }

void ServingPanel::httpStopped(const QString& summary, const QString&) {
  server_->stopped();
  server_->setAvailable(!variants_.isEmpty() && !sweeping_);
  refresh();
  timer_->stop();
  start_->setEnabled(variants_.size() >= 2);
  status_->setStyleSheet(QString());
  status_->setText(summary);
}

void ServingPanel::httpFailed(const QString& message) {
  server_->failed();
  server_->setAvailable(!variants_.isEmpty() && !sweeping_);
  status_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
  status_->setText(message);
}

void ServingPanel::beginRun(const QString& label) {
  run_label_ = label;
  completed_ = 0;
  outcomes_.clear();
  ++run_index_;
  // Runs follow one another on the sweep's time axis, each starting at a named line.
  run_offset_ = sweep_end_;
  for (Chart* c : {latency_, throughput_}) c->addMarker(run_offset_, run_label_, variantColor(run_index_));
  run_hits_.push_back({run_label_, {}, {}});
}

void ServingPanel::addPoint(const ServedPoint& p) {
  ++points_;
  ++completed_;
  const double t = run_offset_ + p.finish;
  sweep_end_ = std::max(sweep_end_, t);
  const int run = std::max(run_index_, 0);
  series(latency_, run_label_, run, true, true, false)->addData(t, p.ttft * 1e3);
  series(latency_, run_label_ + tr(" turnaround"), run, false, false, false)->addData(t, p.turnaround * 1e3);
  if (p.swaps > 0) series(latency_, tr("swap before the request"), -1, true, false, false)->addData(t, p.ttft * 1e3);
  series(throughput_, run_label_, run, true, false, true)->addData(t, completed_);
  if (run_hits_.isEmpty()) run_hits_.push_back({run_label_, {}, {}});
  RunHits& r = run_hits_.back();
  r.hits.resize(p.hits.size());
  r.misses.resize(p.misses.size());
  for (int l = 0; l < p.hits.size(); ++l) {
    r.hits[l] += p.hits[l];
    r.misses[l] += p.misses[l];
  }
  ++outcomes_[p.outcome];
  // As the server's summary says it: "5 completed, 1 cancelled".
  QString finished = tr("%1 completed").arg(outcomes_.value(QStringLiteral("completed")));
  for (const QString& o : {QStringLiteral("cancelled"), QStringLiteral("failed")})
    if (outcomes_.value(o) > 0) finished += QStringLiteral(", %1 %2").arg(outcomes_.value(o)).arg(o);
  status_->setText(p.total > 0 ? tr("%1: %2 of %3 requests").arg(run_label_).arg(p.done).arg(p.total)
                               : tr("%1: %2; the latest for %3, TTFT %4 ms").arg(run_label_, finished, p.target).arg(p.ttft * 1e3, 0, 'f', 1));
  dirty_ = true;
}

// The series `name` of `chart`, created on first use in run `run`'s colour (-1: black); series of
// one run are shown and hidden together from the legend.
QCPGraph* ServingPanel::series(Chart* chart, const QString& name, int run, bool inLegend, bool filled, bool line) {
  for (int i = 0; i < chart->graphCount(); ++i)
    if (chart->graph(i)->name() == name) return chart->graph(i);
  QCPGraph* g = chart->addGraph();
  g->setName(name);
  g->setProperty(Chart::kGroup, run);
  const QColor c = run < 0 ? QColor(Qt::black) : variantColor(run);
  g->setPen(QPen(c, 1.5));
  g->setLineStyle(line ? QCPGraph::lsStepLeft : QCPGraph::lsNone);
  if (!line)
    g->setScatterStyle(run < 0 ? QCPScatterStyle(QCPScatterStyle::ssCross, c, 7)
                               : QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(c, 1.2), filled ? QBrush(c) : Qt::NoBrush, 5));
  if (!inLegend) g->removeFromLegend();
  return g;
}

void ServingPanel::refresh() {
  if (!dirty_) return;
  dirty_ = false;
  // One bar per layer for each run of the sweep, side by side, labelled in the legend.
  QSet<QString> hidden;  // runs toggled off in the legend stay off
  for (int i = 0; i < hits_->plottableCount(); ++i)
    if (!hits_->plottable(i)->visible()) hidden.insert(hits_->plottable(i)->name());
  hits_->clearPlottables();
  auto* group = new QCPBarsGroup(hits_);
  int layers = 0;
  const double width = 0.8 / std::max<qsizetype>(1, run_hits_.size());
  for (qsizetype i = 0; i < run_hits_.size(); ++i) {
    const RunHits& run = run_hits_[i];
    auto* bars = new QCPBars(hits_->xAxis, hits_->yAxis);
    bars->setName(run.label);
    bars->setBrush(variantColor(static_cast<int>(i)));
    bars->setPen(Qt::NoPen);
    bars->setWidth(width);
    bars->setBarsGroup(group);
    layers = std::max(layers, static_cast<int>(run.hits.size()));
    for (int l = 0; l < run.hits.size(); ++l) {
      const qint64 n = run.hits[l] + run.misses[l];
      if (n > 0) bars->addData(l, static_cast<double>(run.hits[l]) / static_cast<double>(n));
    }
  }
  for (int i = 0; i < hits_->plottableCount(); ++i)
    if (hidden.contains(hits_->plottable(i)->name())) hits_->setSeriesVisible(i, false);
  hits_->xAxis->setRange(-0.6, layers - 0.4);
  hits_->layOutLegend();
  hits_->replot(QCustomPlot::rpQueuedReplot);
  latency_->fit();
  throughput_->fit();
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
  sweeping_ = running;
  server_->setAvailable(!running && !variants_.isEmpty());
  start_->setEnabled(!running && variants_.size() >= 2 && !server_->isServing());
  stop_->setEnabled(running);
  if (running) timer_->start();
  else timer_->stop();
}

}  // namespace mosaic::ui
