#include "workbench/main_window.h"
#include "workbench/file_dialogs.h"
#include "workbench/fit_scroll_area.h"
#include <QCoreApplication>
#include <QUrl>
#include <QDesktopServices>
#include "workbench/wheel_guard.h"

#include <QCloseEvent>
#include <QCryptographicHash>
#include <QDir>
#include <QComboBox>
#include <QDockWidget>
#include <QFileDialog>
#include <QLineEdit>
#include <QFileInfo>
#include <QMenuBar>
#include <QScreen>
#include <QScrollArea>
#include <QSpinBox>
#include <QDoubleSpinBox>
#include <QMessageBox>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>

#include "common/machine.h"
#include "model/variant_folders.h"

#include "serving/session_file.h"
#include "workbench/analysis_panel.h"
#include "workbench/chat_pane.h"
#include "workbench/compare_pane.h"
#include "workbench/engine_types.h"
#include "workbench/engine_host.h"
#include "workbench/engine_status.h"
#include "workbench/family_panel.h"
#include "workbench/layout_panel.h"
#include "workbench/runs_panel.h"
#include "workbench/serving_panel.h"
#include "workbench/usage_panel.h"

namespace mosaic::ui {

namespace {
constexpr int kMaxRecent = 8;
// QSettings treats '/' as a group separator: a family's budget is keyed by a hash of its folders.
QString budgetKey(const QStringList& dirs) {
  return QStringLiteral("budgets/") + QString::fromLatin1(QCryptographicHash::hash(dirs.join(QLatin1Char('|')).toUtf8(), QCryptographicHash::Sha1).toHex());
}
}

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), engine_(new EngineHost(this)), family_(new FamilyPanel), layout_(new LayoutPanel), analysis_(new AnalysisPanel), runs_(new RunsPanel), serving_(new ServingPanel), chat_(new ChatPane), usage_(new UsagePanel), compare_(new ComparePane) {
  setWindowTitle(tr("Mosaic workbench"));
  auto* centre = new QTabWidget;
  centre->setObjectName(QStringLiteral("centreTabs"));
  centre->addTab(chat_, tr("Chat"));
  centre->addTab(compare_, tr("Side by side"));
  setCentralWidget(centre);
  auto dock = [this](QWidget* w, const QString& title, const QString& name, Qt::DockWidgetArea area) {
    auto* d = new QDockWidget(title, this);
    d->setObjectName(name);  // saveState() keys docks by object name
    // Each panel scrolls inside its dock, so no panel's natural size (a one-line legend, a row of
    // controls) sets the window's minimum: the window fits a 1366×768 screen. It scrolls only
    // below its minimum: above it, the panel fills the dock.
    auto* scroll = new FitScrollArea(w);
    scroll->setFrameShape(QFrame::NoFrame);
    d->setWidget(scroll);
    addDockWidget(area, d);
    return d;
  };
  QDockWidget* familyDock = dock(family_, tr("Family"), QStringLiteral("familyDock"), Qt::LeftDockWidgetArea);
  QDockWidget* layoutDock = dock(layout_, tr("Layout"), QStringLiteral("layoutDock"), Qt::RightDockWidgetArea);
  QDockWidget* analysisDock = dock(analysis_, tr("Distances"), QStringLiteral("analysisDock"), Qt::RightDockWidgetArea);
  QDockWidget* usageDock = dock(usage_, tr("Expert usage"), QStringLiteral("usageDock"), Qt::RightDockWidgetArea);
  QDockWidget* runsDock = dock(runs_, tr("Runs"), QStringLiteral("runsDock"), Qt::BottomDockWidgetArea);
  QDockWidget* servingDock = dock(serving_, tr("Serving"), QStringLiteral("servingDock"), Qt::BottomDockWidgetArea);
  tabifyDockWidget(servingDock, runsDock);
  servingDock->raise();
  tabifyDockWidget(layoutDock, analysisDock);
  tabifyDockWidget(analysisDock, usageDock);
  layoutDock->raise();

  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open session…"), QKeySequence::Open, this, [this] {
    const QString f = remembered(QFileDialog::getOpenFileName(this, tr("Open a session"), startFolder(), tr("Sessions (*.json)")));
    if (!f.isEmpty()) openSession(f);
  });
  file->addAction(tr("&Save session…"), QKeySequence::Save, this, [this] {
    const QString f = remembered(QFileDialog::getSaveFileName(this, tr("Save the session"), inStartFolder(QStringLiteral("session.json")), tr("Sessions (*.json)")));
    if (!f.isEmpty()) saveSession(f);
  });
  recent_ = file->addMenu(tr("Recent families"));
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(familyDock->toggleViewAction());
  view->addAction(layoutDock->toggleViewAction());
  view->addAction(analysisDock->toggleViewAction());
  view->addAction(usageDock->toggleViewAction());
  view->addAction(servingDock->toggleViewAction());
  view->addAction(runsDock->toggleViewAction());
  view->addSeparator();
  view->addAction(tr("&Reset layout"), this, &MainWindow::resetLayout);
  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&Documentation"), this, [this] {
    const QString readme = documentationPath();
    if (readme.isEmpty() || !QDesktopServices::openUrl(QUrl::fromLocalFile(readme)))
      QMessageBox::information(this, tr("Documentation"),
                               readme.isEmpty() ? tr("The README was not found beside this program.") : tr("Open %1 in a browser or editor.").arg(readme));
  });
  help->addAction(tr("&Command-line reference"), this, [this] {
    const QString readme = documentationPath();
    const QString cli = readme.isEmpty() ? QString() : QFileInfo(readme).absolutePath() + QStringLiteral("/docs/cli.md");
    if (!cli.isEmpty() && QFileInfo::exists(cli) && QDesktopServices::openUrl(QUrl::fromLocalFile(cli))) return;
    QMessageBox::information(this, tr("Command-line reference"),
                             tr("Everything the workbench does runs from mosaic-cli too. In a terminal:<br><br><tt>man mosaic-cli</tt> — every "
                                "command and option<br><tt>mosaic-cli --help</tt>, <tt>mosaic-cli COMMAND --help</tt> — the same, briefly"));
  });
  help->addAction(tr("&About Mosaic"), this, [this] {
    QMessageBox::about(this, tr("About Mosaic"),
                       tr("<h3>Mosaic %1</h3><p>Serve many fine-tuned variants of one Mixture-of-Experts model on one GPU, "
                          "and see how.</p><p>%2</p>")
                           .arg(QString::fromLatin1(mosaic_version()), QString::fromStdString(build_description()).toHtmlEscaped()));
  });

  connect(family_, &FamilyPanel::openRequested, this, &MainWindow::openFamily);
  // The host budget is the host store's, made when a family opens: the open family opens again under it.
  connect(family_, &FamilyPanel::hostBudgetRequested, this, [this](qint64 bytes) {
    engine_->setHostBudget(bytes);
    if (!layout_->configFamily().isEmpty()) return layout_->openConfigFamily(layout_->configFamily());  // the what-if's tiers
    const QStringList dirs = family_->variantDirs();
    if (!dirs.isEmpty()) openFamily(dirs);
  });
  // The device: the family panel asks, the engine answers; engine sweeps serve on it too.
  connect(family_, &FamilyPanel::deviceRequested, engine_, &EngineHost::setDevice);
  connect(engine_, &EngineHost::devicesProbed, family_, &FamilyPanel::showDevices);
  connect(engine_, &EngineHost::deviceChanged, family_, &FamilyPanel::showDevice);
  connect(engine_, &EngineHost::deviceChanged, serving_, &ServingPanel::setDevice);
  connect(engine_, &EngineHost::deviceChanged, this, [this] {
    device_error_.clear();
    statusBar()->showMessage(tr("Serving on %1").arg(family_->deviceBox()->currentText()), 5000);
  });
  connect(family_, &FamilyPanel::cpuWeightsRequested, engine_, &EngineHost::setCpuWeights);
  connect(engine_, &EngineHost::cpuWeightsChanged, family_, &FamilyPanel::showCpuWeights);
  connect(engine_, &EngineHost::cpuWeightsFailed, this, [this](const QString& message, const QString& weights) {
    family_->showCpuWeights(weights);
    family_->showError(tr("CPU weights"), message);
  });
  connect(engine_, &EngineHost::deviceFailed, this, [this](const QString& message, const QString& device) {
    family_->showDevice(device);
    family_->showError(tr("Serve on"), message);
    device_error_ = message;  // shown again once a family opening next (a session's) has cleared it
  });
  connect(engine_, &EngineHost::familyOpened, this, [this] {
    if (!device_error_.isEmpty()) family_->showError(tr("Serve on"), device_error_);
    device_error_.clear();
  });
  engine_->probeDevices();
  connect(family_, &FamilyPanel::cancelRequested, engine_, &EngineHost::cancelOpen);
  connect(engine_, &EngineHost::progress, family_, &FamilyPanel::showProgress);
  connect(engine_, &EngineHost::familyOpened, family_, &FamilyPanel::showFamily);
  connect(engine_, &EngineHost::familyOpened, chat_, &ChatPane::setVariants);
  connect(engine_, &EngineHost::familyOpened, compare_, &ComparePane::setVariants);
  connect(compare_, &ComparePane::compareRequested, engine_, &EngineHost::compare);
  connect(compare_, &ComparePane::stopRequested, engine_, &EngineHost::stopCompare);
  connect(engine_, &EngineHost::compareToken, compare_, &ComparePane::appendToken);
  connect(engine_, &EngineHost::compareFinished, compare_, &ComparePane::finish);
  connect(engine_, &EngineHost::compareFailed, compare_, &ComparePane::showError);
  connect(engine_, &EngineHost::familyFailed, this, [this](const QString& m) {
    // The family that was open (if any) is still open: nothing of the failed one is kept.
    opening_.clear();
    opening_title_.clear();
    pending_serving_.clear();
    // The open family's host budget stays the one it was opened with (a budget below the minimum failed).
    family_->setHostBudget(family_->model()->family().host_budget);
    engine_->setHostBudget(family_->hostBudget());
    family_->showError(tr("Open family"), m);
  });
  connect(engine_, &EngineHost::familyOpened, this, [this] {
    if (opening_.isEmpty()) return;
    rememberFamily(opening_);
    family_key_ = budgetKey(opening_);
    if (!opening_title_.isEmpty()) setWindowTitle(opening_title_);
    opening_.clear();
    opening_title_.clear();
  });
  connect(engine_, &EngineHost::familyOpened, analysis_, &AnalysisPanel::setVariants);
  connect(analysis_, &AnalysisPanel::heatmapRequested, engine_, &EngineHost::requestHeatmap);
  connect(engine_, &EngineHost::heatmapReady, analysis_, &AnalysisPanel::showHeatmap);
  connect(engine_, &EngineHost::heatmapFailed, analysis_, &AnalysisPanel::showError);
  connect(usage_, &UsagePanel::usageRequested, engine_, &EngineHost::requestUsage);
  connect(engine_, &EngineHost::usageReady, usage_, &UsagePanel::showUsage);
  connect(engine_, &EngineHost::usageFailed, usage_, &UsagePanel::showError);
  connect(engine_, &EngineHost::familyOpened, serving_, &ServingPanel::setFamily);
  connect(engine_, &EngineHost::familyOpened, this, [this] {  // after setFamily, which resets the capacity
    if (!pending_serving_.isEmpty()) serving_->applySettings(pending_serving_);
    pending_serving_.clear();
  });
  connect(layout_, &LayoutPanel::importRequested, engine_, &EngineHost::importLayout);
  connect(layout_, &LayoutPanel::exportRequested, engine_, &EngineHost::exportLayout);
  connect(engine_, &EngineHost::layoutExported, this, [this](const QString& f) { statusBar()->showMessage(tr("Layout written to %1").arg(f), 5000); });
  connect(serving_, &ServingPanel::startRequested, engine_, &EngineHost::startServing);
  connect(serving_, &ServingPanel::stopRequested, engine_, &EngineHost::stopServing);
  connect(engine_, &EngineHost::servingRunStarted, serving_, &ServingPanel::runStarted);
  connect(engine_, &EngineHost::servingRatesChosen, serving_, &ServingPanel::ratesChosen);
  connect(engine_, &EngineHost::servingProbeProgress, serving_, &ServingPanel::probeProgress);
  connect(engine_, &EngineHost::servedRequest, serving_, &ServingPanel::addPoint);
  connect(engine_, &EngineHost::servingFinished, serving_, &ServingPanel::finished);
  connect(engine_, &EngineHost::servingFailed, serving_, &ServingPanel::showError);
  connect(engine_, &EngineHost::servingFinished, runs_, [this](const QString&, const QString& db) { runs_->openDatabase(db); });
  connect(serving_, &ServingPanel::httpStartRequested, engine_, &EngineHost::startHttpServer);
  connect(serving_, &ServingPanel::httpStopRequested, engine_, &EngineHost::stopHttpServer);
  connect(engine_, &EngineHost::httpServerStarted, serving_, &ServingPanel::httpStarted);
  connect(engine_, &EngineHost::httpServerModels, serving_, &ServingPanel::httpModels);
  connect(engine_, &EngineHost::httpServerStopped, serving_, &ServingPanel::httpStopped);
  connect(engine_, &EngineHost::httpServerFailed, serving_, &ServingPanel::httpFailed);
  connect(engine_, &EngineHost::httpServerStopped, runs_, [this](const QString&, const QString& db) {
    if (!db.isEmpty()) runs_->openDatabase(db);
  });
  connect(runs_, &RunsPanel::loadRequested, engine_, &EngineHost::loadRuns);
  connect(runs_, &RunsPanel::exportRequested, engine_, &EngineHost::exportReport);
  connect(runs_, &RunsPanel::traceRequested, engine_, &EngineHost::loadTrace);
  connect(engine_, &EngineHost::traceLoaded, runs_, &RunsPanel::showTrace);
  connect(engine_, &EngineHost::runsLoaded, runs_, &RunsPanel::showRuns);
  connect(engine_, &EngineHost::reportDataReady, runs_, &RunsPanel::writeReport);
  connect(engine_, &EngineHost::runsFailed, runs_, &RunsPanel::showError);
  connect(runs_, &RunsPanel::loadRequested, this, [](const QString& db) { QSettings().setValue(QStringLiteral("runs/database"), db); });
  connect(engine_, &EngineHost::layoutPlanned, layout_, &LayoutPanel::showLayout);
  // Counts made under another layout or family say nothing of this one.
  connect(engine_, &EngineHost::layoutPlanned, usage_, [this] { usage_->clear(tr("The layout changed: Count expert choices again to see how it serves the text.")); });
  connect(engine_, &EngineHost::layoutFailed, this, [this](const QString& m) { layout_->showError(tr("Plan layout"), m); });
  connect(layout_, &LayoutPanel::planRequested, engine_, &EngineHost::planLayout);
  connect(layout_, &LayoutPanel::planVirtualRequested, engine_, &EngineHost::planVirtual);
  // What-if plans from config.json files reach the Layout panel only: nothing serves them.
  connect(layout_, &LayoutPanel::configPlanRequested, engine_, &EngineHost::planFromConfigs);
  connect(engine_, &EngineHost::configLayoutPlanned, layout_, &LayoutPanel::showLayout);
  connect(layout_, &LayoutPanel::configFamilyLeft, this, [this] {
    engine_->planLayout(layout_->budgetBytes(), layout_->policy(), layout_->reserve(), layout_->shares());
  });
  connect(engine_, &EngineHost::layoutPlanned, serving_, &ServingPanel::followLayout);
  connect(chat_, &ChatPane::chatRequested, engine_, &EngineHost::chat);
  connect(chat_, &ChatPane::stopRequested, engine_, &EngineHost::stopChat);
  connect(engine_, &EngineHost::chatToken, chat_, &ChatPane::appendToken);
  connect(engine_, &EngineHost::chatFinished, chat_, &ChatPane::finish);
  connect(engine_, &EngineHost::chatFailed, this, [this](const QString& m) { chat_->showError(tr("Chat"), m); });
  connect(engine_, &EngineHost::layoutPlanned, this, [this](const LayoutInfo& l) {
    if (!family_key_.isEmpty()) QSettings().setValue(family_key_, l.budget);
    statusBar()->showMessage(tr("Layout: %1 of %2 expert positions resident").arg(l.capacity).arg(l.positions), 5000);
  });
  connect(engine_, &EngineHost::familyChangeServed, this, [this](const QString& summary) { statusBar()->showMessage(summary, 15000); });
  // What the engine serves and runs, always shown (the messages on the left are transient).
  auto* engineStatus = new EngineStatus;
  statusBar()->addPermanentWidget(engineStatus);
  engineStatus->setDevice(family_->deviceBox()->currentText());
  connect(engine_, &EngineHost::deviceChanged, engineStatus, [this, engineStatus] { engineStatus->setDevice(family_->deviceBox()->currentText()); });
  connect(engine_, &EngineHost::familyOpened, engineStatus, [engineStatus](const FamilyInfo& f) { engineStatus->setFamily(static_cast<int>(f.variants.size())); });
  connect(engine_, &EngineHost::layoutPlanned, engineStatus, [engineStatus](const LayoutInfo& l) { engineStatus->setLayout(l.capacity, l.positions); });
  connect(engine_, &EngineHost::servingRunStarted, engineStatus, [engineStatus] { engineStatus->setSweepRunning(true); });
  connect(engine_, &EngineHost::servingFinished, engineStatus, [engineStatus] { engineStatus->setSweepRunning(false); });
  connect(engine_, &EngineHost::servingFailed, engineStatus, [engineStatus] { engineStatus->setSweepRunning(false); });
  connect(engine_, &EngineHost::httpServerStarted, engineStatus, [engineStatus](const QString& url) { engineStatus->setServerUrl(url); });
  connect(engine_, &EngineHost::httpServerStopped, engineStatus, [engineStatus] { engineStatus->setServerUrl({}); });
  connect(engine_, &EngineHost::httpServerFailed, engineStatus, [engineStatus] { engineStatus->setServerUrl({}); });

  default_state_ = saveState();
  QSettings settings;
  const bool restored = restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
  restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
  // The first time, or when the saved place is off this screen: 1400×900 or 95 % of what the screen
  // offers, whichever is smaller, centred.
  if (QScreen* s = screen()) {
    const QRect available = s->availableGeometry();
    if (!restored || !available.contains(geometry())) {
      resize(QSize(1400, 900).boundedTo(available.size() * 0.95));
      move(available.center() - rect().center());
    }
  }
  rebuildRecentMenu();
  guard_wheel(this);  // every panel is built: their fields take the wheel only when focused
  const QString db = settings.value(QStringLiteral("runs/database")).toString();
  if (!db.isEmpty() && QFileInfo::exists(db)) runs_->openDatabase(db);
}

MainWindow::~MainWindow() = default;

void MainWindow::resetLayout() {
  restoreState(default_state_);
  for (QDockWidget* d : findChildren<QDockWidget*>()) d->show();
  for (const char* front : {"servingDock", "layoutDock"})
    if (auto* d = findChild<QDockWidget*>(QString::fromLatin1(front))) d->raise();
}

QString MainWindow::documentationPath() {
  const QString app = QCoreApplication::applicationDirPath();
  for (const QString& candidate : {app + QStringLiteral("/../share/doc/mosaic/README.md"), QStringLiteral(MOSAIC_SOURCE_README)})
    if (QFileInfo::exists(candidate)) return QFileInfo(candidate).canonicalFilePath();
  return {};
}

QStringList MainWindow::expandFamilyFolders(const QStringList& dirs) {
  std::vector<std::filesystem::path> paths;
  for (const QString& d : dirs) paths.emplace_back(d.toStdString());
  QStringList out;
  try {
    for (const auto& [name, dir] : discover_variants(paths)) {
      const QString clean = QDir::cleanPath(QString::fromStdString(dir.string()));
      if (!out.contains(clean)) out << clean;  // a dropped family folder may hold variants already open
    }
  } catch (const std::exception&) {
    // The caller reports folders that name no checkpoint.
  }
  return out;
}

bool MainWindow::openFamily(const QStringList& dirs) {
  const QStringList variants = expandFamilyFolders(dirs);
  if (variants.isEmpty()) {
    family_->showError(tr("Open family"), tr("no folder holding a config.json among: %1").arg(dirs.join(QStringLiteral(", "))));
    return false;
  }
  opening_ = variants;
  opening_title_ = tr("Mosaic workbench");
  const qint64 budget = QSettings().value(budgetKey(variants), 0).toLongLong();  // 0: the engine's default
  engine_->openFamily(variants, budget, layout_->policy(), layout_->reserve());
  return true;
}

bool MainWindow::openSession(const QString& file) {
  try {
    const SessionFile session = load_session_file(file.toStdString());
    QStringList dirs;
    for (const auto& v : session.variants) dirs << QString::fromStdString(v.string());
    pending_serving_ = QString::fromStdString(session.serving_json);
    chat_->preset(QString::fromStdString(session.chat_target), QString::fromStdString(session.chat_prompt),
                  session.chat_max_new_tokens.value_or(-1), session.chat_temperature.value_or(-1), session.chat_top_p.value_or(-1));
    const ReserveSpec r = session.reserve.value_or(ReserveSpec{});  // a session without one planned with the defaults
    const QVector<double> shares(session.shares.begin(), session.shares.end());
    layout_->presetPlan(QString::fromStdString(session.policy), {r.context_tokens, r.requests, r.prefill_chunk, r.miss_slots}, shares);
    opening_ = dirs;
    opening_title_ = tr("Mosaic workbench — %1").arg(QFileInfo(file).fileName());
    // Before the open, on the engine's queue: the family is planned on the session's device (or, where
    // that cannot be used, stays where it is and the family panel says why).
    engine_->setDevice(QString::fromUtf8(device_name(session.device)));
    engine_->setHostBudget(session.host_budget_bytes ? static_cast<qint64>(*session.host_budget_bytes) : 0);
    engine_->openFamily(dirs, session.budget_bytes ? static_cast<qint64>(*session.budget_bytes) : 0, QString::fromStdString(session.policy),
                        layout_->reserve(), shares);
    // After the open, on the engine's queue: applied to the session's family under its host budget
    // (read in place under one is refused there, saying why), not to the family being replaced.
    engine_->setCpuWeights(QString::fromUtf8(cpu_weights_name(session.cpu_weights)));
    if (!session.layout.empty()) engine_->importLayout(QString::fromStdString(session.layout.string()));  // runs after the open
    return true;
  } catch (const std::exception& e) {
    family_->showError(tr("Open session"), QString::fromUtf8(e.what()));
    return false;
  }
}

bool MainWindow::saveSession(const QString& file) {
  SessionFile s;
  for (const VariantInfo& v : family_->model()->family().variants) s.variants.emplace_back(v.dir.toStdString());
  if (s.variants.empty()) {
    family_->showError(tr("Save session"), tr("open a family first"));
    return false;
  }
  // A what-if plan from config.json files is not the session's: back to the open family's budget first.
  layout_->leaveConfigFamily();
  s.budget_bytes = static_cast<std::uint64_t>(layout_->budgetBytes());
  s.policy = layout_->policy().toStdString();
  const QVector<double> shares = layout_->shares();
  s.shares.assign(shares.begin(), shares.end());
  const ReserveSettings r = layout_->reserve();
  s.reserve = ReserveSpec{.context_tokens = r.context, .requests = r.requests, .prefill_chunk = r.prefill_chunk, .miss_slots = r.miss_slots};
  s.device = parse_device(family_->device().toStdString()).value_or(Device::Cpu);
  s.cpu_weights = parse_cpu_weights(family_->cpuWeights().toStdString()).value_or(CpuWeights::Stored);
  if (const qint64 host = family_->model()->family().host_budget; host > 0) s.host_budget_bytes = static_cast<std::uint64_t>(host);
  s.serving_json = serving_->settingsJson().toStdString();
  s.chat_target = chat_->targetBox()->currentText().toStdString();
  s.chat_prompt = chat_->promptEdit()->text().toStdString();
  s.chat_max_new_tokens = chat_->maxNewBox()->value();
  s.chat_temperature = chat_->temperatureBox()->value();
  s.chat_top_p = chat_->topPBox()->value();
  try {
    save_session_file(file.toStdString(), s);
  } catch (const std::exception& e) {
    family_->showError(tr("Save session"), QString::fromUtf8(e.what()));
    return false;
  }
  statusBar()->showMessage(tr("Session saved to %1").arg(file), 5000);
  setWindowTitle(tr("Mosaic workbench — %1").arg(QFileInfo(file).fileName()));
  return true;
}

void MainWindow::rememberFamily(const QStringList& dirs) {
  QSettings settings;
  QStringList recent = settings.value(QStringLiteral("recent/families")).toStringList();
  const QString key = dirs.join(QLatin1Char('|'));
  recent.removeAll(key);
  recent.prepend(key);
  while (recent.size() > kMaxRecent) recent.removeLast();
  settings.setValue(QStringLiteral("recent/families"), recent);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  recent_->clear();
  for (const QString& key : QSettings().value(QStringLiteral("recent/families")).toStringList()) {
    const QStringList dirs = key.split(QLatin1Char('|'));
    recent_->addAction(tr("%1 variants in %2").arg(dirs.size()).arg(QFileInfo(dirs.front()).absolutePath()), this,
                       [this, dirs] { openFamily(dirs); });
  }
  recent_->setEnabled(!recent_->isEmpty());
}

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings settings;
  settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
  settings.setValue(QStringLiteral("window/state"), saveState());
  event->accept();
}

}  // namespace mosaic::ui
